#!/usr/bin/env python3
"""Real media files for the decoding tests, made with Debian's tools, and PIL's view of them.

Needs `apt-get install -y imagemagick espeak-ng sox`. Writes tests/fixtures/media/:
  logo.jpg (160x120, ImageMagick's logo:), rose.png / rose.webp / rose.gif (70x46, rose:),
  hello.wav (espeak-ng, 22050 Hz mono 16-bit), hello16k.flac (sox, resampled to 16 kHz),
  reference.json: per image its size, PIL's RGB mean and the sha256 of PIL's RGB bytes; per
  audio file its rate, channels and frame count (Python's wave module / sox's header).

Run (from the repository root):
  /root/.cache/oxinfer/refvenv/bin/python tools/ref/make_media_fixtures.py
"""
import hashlib
import json
import subprocess
import wave
from pathlib import Path

import numpy as np
from PIL import Image

OUT = Path(__file__).resolve().parents[2] / "tests/fixtures/media"


def run(*cmd):
    subprocess.run(cmd, check=True)


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    run("convert", "logo:", "-resize", "160x120", str(OUT / "logo.jpg"))
    run("convert", "rose:", str(OUT / "rose.png"))
    run("convert", "rose:", str(OUT / "rose.webp"))
    run("convert", "rose:", "-colors", "64", str(OUT / "rose.gif"))
    run("espeak-ng", "-w", str(OUT / "hello.wav"), "Hello world.")
    run("sox", str(OUT / "hello.wav"), "-r", "16000", str(OUT / "hello16k.flac"))
    ref = {"images": {}, "audio": {}}
    for name in ["logo.jpg", "rose.png", "rose.webp", "rose.gif"]:
        rgb = np.asarray(Image.open(OUT / name).convert("RGB"))
        ref["images"][name] = {
            "width": rgb.shape[1], "height": rgb.shape[0],
            "mean": float(rgb.astype(np.float64).mean()),
            "sha256": hashlib.sha256(rgb.tobytes()).hexdigest(),
        }
    with wave.open(str(OUT / "hello.wav")) as w:
        ref["audio"]["hello.wav"] = {"rate": w.getframerate(), "channels": w.getnchannels(),
                                     "frames": w.getnframes()}
    frames = int(subprocess.run(["soxi", "-s", str(OUT / "hello16k.flac")], check=True,
                                capture_output=True, text=True).stdout)
    ref["audio"]["hello16k.flac"] = {"rate": 16000, "channels": 1, "frames": frames}
    (OUT / "reference.json").write_text(json.dumps(ref, indent=1) + "\n")
    print(json.dumps(ref, indent=1))


if __name__ == "__main__":
    main()
