// The demo page: load a GGUF (picker, drop or same-origin URL), chat with streamed tokens,
// show prefill and decode speed. Everything model-related runs in the worker (oxinfer.js).
import { Oxinfer } from "./oxinfer.js";

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
// `?build=simd128` or `?build=relaxed`: that module, not the one the browser's features choose.
const ox = new Oxinfer(undefined, { build: params.get("build") ?? "auto" });
// `?kernels=scalar`: the reference kernels (as OXINFER_KERNELS=scalar natively), for tests.
const kernelsChosen = params.get("kernels") ? ox.setKernels(params.get("kernels")) : Promise.resolve();
const history = [];
let busy = false;

// For scripts and tests (web/tests/drive_browser.py): the client (and its class, for a second
// worker), and a promise per chat turn.
window.oxinferApp = { ox, history, lastTurn: null, info: null, Oxinfer };

async function load(source, label) {
  setBusy(true);
  $("status").textContent = `Loading ${label}…`;
  const bar = $("progress");
  bar.hidden = false;
  bar.value = 0;
  try {
    await kernelsChosen;
    const info = await ox.load(source, {
      onProgress: (received, total) => {
        if (total) bar.value = received / total;
        $("status").textContent = `Loading ${label}: ${(received / 2 ** 20).toFixed(0)} MiB`;
      },
    });
    window.oxinferApp.info = info;
    history.length = 0;
    $("log").replaceChildren();
    $("status").textContent =
      `${info.name}: ${info.architecture}, ${(info.parameters / 1e6).toFixed(0)} M parameters, ` +
      `context ${info.capacity}, parsed in ${(info.loadMs / 1000).toFixed(1)} s, ` +
      `kernels ${info.kernels === "scalar" ? "scalar" : info.isa}` +
      (info.hasChatTemplate ? "" : " (no chat template: cannot chat)");
    $("status").dataset.state = "ready";
    $("prompt").disabled = !info.hasChatTemplate;
  } catch (e) {
    $("status").textContent = `Could not load ${label}: ${e.message}`;
    $("status").dataset.state = "error";
  } finally {
    bar.hidden = true;
    setBusy(false);
  }
}

// `generating`: a reply is streaming (Stop cancels it).
function setBusy(b, generating = false) {
  busy = b;
  $("send").disabled = b || $("prompt").disabled;
  $("stop").disabled = !generating;
  $("load-url").disabled = b;
  $("file").disabled = b;
}

function bubble(role, text) {
  const div = document.createElement("div");
  div.className = `msg ${role}`;
  div.textContent = text;
  $("log").append(div);
  $("log").scrollTop = $("log").scrollHeight;
  return div;
}

async function send() {
  const text = $("prompt").value.trim();
  if (!text || busy) return;
  $("prompt").value = "";
  history.push({ role: "user", content: text });
  bubble("user", text);
  const out = bubble("assistant", "");
  const options = {
    temperature: Number($("temperature").value),
    maxTokens: Number($("max-tokens").value),
  };
  setBusy(true, true);
  $("stats").textContent = "";
  const turn = ox
    .generate(history, options, (tok) => {
      out.textContent += tok.text;
      $("log").scrollTop = $("log").scrollHeight;
    })
    .then((s) => {
      history.push({ role: "assistant", content: out.textContent });
      $("stats").textContent = speed(s);
      out.dataset.done = s.reason;
      return { text: out.textContent, ...s };
    })
    .catch((e) => {
      history.pop();
      out.classList.add("error");
      out.textContent = e.message;
      out.dataset.done = "error";
      return { error: e.message };
    })
    .finally(() => setBusy(false));
  window.oxinferApp.lastTurn = turn;
  return turn;
}

function speed(s) {
  if (s.reason === "cancelled") return "stopped";
  const tps = (n, ms) => (ms > 0 ? (n / ms) * 1000 : 0).toFixed(1);
  return (
    `prefill ${s.prefillTokens} tok, ${tps(s.prefillTokens, s.prefillMs)} tok/s · ` +
    `decode ${s.decodeTokens} tok, ${tps(s.decodeTokens, s.decodeMs)} tok/s · ${s.reason}`
  );
}

$("file").onchange = () => {
  const f = $("file").files[0];
  if (f) load({ blob: f }, f.name);
};
$("load-url").onclick = () => {
  const url = $("url").value.trim();
  if (url) load({ url }, url);
};
const drop = $("drop");
drop.ondragover = (e) => {
  e.preventDefault();
  drop.classList.add("over");
};
drop.ondragleave = () => drop.classList.remove("over");
drop.ondrop = (e) => {
  e.preventDefault();
  drop.classList.remove("over");
  const f = e.dataTransfer.files[0];
  if (f && !busy) load({ blob: f }, f.name);
};
$("send").onclick = send;
$("prompt").onkeydown = (e) => {
  if (e.key === "Enter" && !e.shiftKey) {
    e.preventDefault();
    send();
  }
};
$("prompt").oninput = () => ($("send").disabled = busy || $("prompt").disabled);
$("stop").onclick = () => ox.cancel();
$("new-chat").onclick = () => {
  if (busy) return;
  history.length = 0;
  $("log").replaceChildren();
  $("stats").textContent = "";
};
if (params.get("model")) {
  $("url").value = params.get("model");
  load({ url: params.get("model") }, params.get("model"));
}
