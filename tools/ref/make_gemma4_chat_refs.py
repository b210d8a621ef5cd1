#!/usr/bin/env python3
"""Reference renderings of the Gemma 4 chat template: tests/fixtures/gemma4-chat/gemma4.json.

The template text is tests/fixtures/gemma4-chat/chat_template.jinja. Neither transformers 5.24
nor the gguf package ship it (transformers only knows Gemma 4's response markers, in
``transformers/cli/serving/utils.py``); the file is the copy llama.cpp keeps in
``models/templates/gemma4.jinja`` (ggml-org/llama.cpp, commit 75f1ba7389067a9f90082515e124c377a1e104b2).

Each case holds the messages, ``add_generation_prompt``, extra variables and the exact string
``tokenizer.apply_chat_template(messages, chat_template=TEMPLATE, tokenize=False, ...)`` returns,
with the BOS/EOS texts of the gemma-3-270m tokenizer (``<bos>`` / ``<eos>``, as in Gemma 4).

Run with the reference venv:
    /root/.cache/oxinfer/refvenv/bin/python tools/ref/make_gemma4_chat_refs.py
"""

from __future__ import annotations

import importlib.metadata
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_chat_refs import GEMMA3, MODELS, msgs, render_cases  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
DIR = REPO / "tests" / "fixtures" / "gemma4-chat"

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city — naïve café",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "City name, e.g. Zürich"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "nullable": True},
                    "days": {"type": "integer", "description": "1 to 7"},
                    "where": {
                        "type": "object",
                        "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}},
                        "required": ["lat"],
                    },
                    "tags": {"type": "array", "items": {"type": "string"}},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": 'Search the web for "text"',
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": ["string", "null"]}},
                "required": ["query"],
            },
        },
    },
]

TRACE = "<|channel>thought\nThe user wants a colour; blue is fine.<channel|>Blue."

CASES = [
    ("user", msgs(("user", "Hello!")), False, None),
    ("user_generation_prompt", msgs(("user", "Hello!")), True, None),
    ("system_user", msgs(("system", "  You are a terse assistant. "), ("user", "What is 2+2?")), True, None),
    ("developer_user", msgs(("developer", "Answer in French."), ("user", "Hi")), True, None),
    (
        "multi_turn",
        msgs(("user", "Hi there"), ("assistant", "Hello! How can I help?"), ("user", "Tell me a joke.")),
        True,
        None,
    ),
    (
        "system_multi_turn",
        msgs(("system", "Be brief."), ("user", "Name a colour."), ("assistant", "Blue."), ("user", "Another.")),
        True,
        None,
    ),
    ("assistant_last", msgs(("user", "Say hi"), ("assistant", "hi")), False, None),
    ("history_thinking_stripped", msgs(("user", "Name a colour."), ("assistant", TRACE), ("user", "Why?")), True, None),
    ("thinking_on", msgs(("user", "Slow answer")), True, {"enable_thinking": True}),
    ("thinking_on_system", msgs(("system", "Be careful."), ("user", "Slow answer")), True, {"enable_thinking": True}),
    ("thinking_off", msgs(("user", "Quick answer")), True, {"enable_thinking": False}),
    ("tools", msgs(("system", "Use tools."), ("user", "Weather in Zürich?")), True, {"tools": TOOLS}),
    ("tools_thinking", msgs(("user", "Weather?")), True, {"tools": TOOLS, "enable_thinking": True}),
    ("non_ascii", msgs(("user", "Grüß dich! 你好 🤗 — ça va ? Привет, мир. 👨‍👩‍👧")), True, None),
    ("whitespace", msgs(("user", "  padded \n\n text\twith tabs  \n")), True, None),
    ("special_text_in_content", msgs(("user", "<|turn> and <channel|> are just text here")), True, None),
    # Tool calls (OpenAI / transformers shape) and Gemma 4's tool_responses.
    (
        "tool_call_mapping_and_response",
        msgs(("system", "Use tools."), ("user", "Weather in Zürich?"))
        + [
            {"role": "assistant", "content": "", "tool_calls": [
                {"type": "function", "function": {"name": "get_weather", "arguments": {
                    "city": "Zürich", "days": 3, "unit": None, "where": {"lat": 47.37, "lon": 8.54},
                    "tags": ["now", "wind"], "metric": True}}}]},
            {"role": "tool", "content": "", "tool_responses": [
                {"name": "get_weather", "response": {"temp": 21.5, "sky": "clear — sunny", "ok": True}}]},
        ],
        True,
        {"tools": TOOLS},
    ),
    (
        "tool_call_string_args_two_calls",
        msgs(("user", "Search twice"))
        + [
            {"role": "assistant", "content": "Searching.", "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "search", "arguments": '{"query": "naïve"}'}},
                {"id": "call_2", "type": "function",
                 "function": {"name": "search", "arguments": {"query": "café"}}}]},
            {"role": "tool", "content": "", "tool_responses": [
                {"name": "search", "response": "3 results"}, {"name": "search", "response": 7}]},
            {"role": "user", "content": "Thanks"},
        ],
        True,
        {"tools": TOOLS},
    ),
    (
        "tool_response_with_content",
        msgs(("user", "Weather?"))
        + [
            {"role": "assistant", "content": "", "tool_calls": [
                {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]},
            {"role": "tool", "content": "Done.", "tool_responses": [
                {"name": "get_weather", "response": {"temp": -3}}]},
        ],
        False,
        {"tools": TOOLS},
    ),
]


def main() -> None:
    from transformers import AutoTokenizer

    template = (DIR / "chat_template.jinja").read_text(encoding="utf-8")
    tok = AutoTokenizer.from_pretrained(str(MODELS), gguf_file=GEMMA3)
    doc = {
        "name": "gemma4",
        "source": "llama.cpp models/templates/gemma4.jinja (commit 75f1ba7); BOS/EOS of " + GEMMA3,
        "versions": {
            "transformers": importlib.metadata.version("transformers"),
            "jinja2": importlib.metadata.version("jinja2"),
        },
        "bos_token": tok.bos_token,
        "eos_token": tok.eos_token,
        "template_file": "chat_template.jinja",
        "cases": render_cases(tok, template, CASES),
    }
    path = DIR / "gemma4.json"
    path.write_text(json.dumps(doc, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    n_err = sum("error" in c for c in doc["cases"])
    print(f"gemma4: {len(doc['cases'])} cases ({n_err} errors) -> {path}")


if __name__ == "__main__":
    main()
