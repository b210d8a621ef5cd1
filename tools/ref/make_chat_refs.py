#!/usr/bin/env python3
"""Make the chat-template reference fixtures in tests/fixtures/chat/.

For each template, ``<name>.json`` holds the template source, the BOS/EOS texts the template sees,
and, per case, the messages, ``add_generation_prompt``, extra variables and the exact string
``tokenizer.apply_chat_template(messages, chat_template=TEMPLATE, tokenize=False, ...)`` returns
(or the error message when the template raises). The Rust tests need no model file.

Templates:
* ``smollm2``: ``tokenizer.chat_template`` of SmolLM2-135M-Instruct.Q4_1.gguf;
* ``gemma3``: the Gemma 3 instruct template. The gemma-3-270m GGUF used for the tokenizer tests is
  the base model and carries no ``tokenizer.chat_template``, so the template of the instruction-tuned
  Gemma 3 checkpoints is written below (rendered with the gemma-3-270m tokenizer's BOS/EOS);
* ``features``: written for these tests: namespaces, slices, loop controls, loop filters,
  ``selectattr``, Python string and dict methods, string-literal escapes (backslash-newline,
  ``\\x``, octal, ``\\U``), ``tojson`` options, Python's printing of None/True/lists/dicts/floats,
  ``{% generation %}``, ``enable_thinking``, reassigning ``messages``;
* ``chatml_tools``: written for these tests in the style of ChatML templates with tool schemas;
* ``qwen25``, ``qwen3``, ``qwen35``, ``r1_distill_qwen``: the chat templates of
  Qwen2.5-7B-Instruct, Qwen3-0.6B, Qwen3.5-4B and DeepSeek-R1-Distill-Qwen-32B, read from the copies
  llama.cpp keeps in ``models/templates/`` (llama-cpp-python sdist, fetched by
  tools/ref/llamacpp_convert.py into ~/.cache/oxinfer/llama-cpp-src); cases with tools, tool
  responses, thinking on/off and earlier assistant turns that carry a ``<think>`` trace.

Run with the reference venv:
    /root/.cache/oxinfer/refvenv/bin/python tools/ref/make_chat_refs.py
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

REPO = Path(__file__).resolve().parents[2]
OUT_DIR = REPO / "tests" / "fixtures" / "chat"
MODELS = Path(os.environ.get("OXINFER_TEST_MODELS", Path.home() / ".cache" / "oxinfer" / "models"))
SMOLLM2 = "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA3 = "gemma-3-270m-q4_k_m.gguf"

GEMMA3_TEMPLATE = """{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
"""

FEATURES_TEMPLATE = """{#- Exercises what real chat templates use. -#}
{%- set ns = namespace(n_user=0, last_user=-1, sys='') -%}
{%- for m in messages -%}
    {%- if m.role == 'user' -%}{%- set ns.n_user = ns.n_user + 1 -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}
{%- endfor -%}
{%- if messages[0]['role'] == 'system' -%}
    {%- set ns.sys = messages[0]['content'].strip() -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{{ bos_token }}
{%- if tools is not none %}
# Tools
{% for tool in tools %}
{{ tool | tojson }}
{{ tool.function | tojson(indent=2) }}
{%- for name, spec in tool.function.parameters.properties.items() %}
- {{ name }}: {{ spec.get('type', 'any') }}{% if spec.enum is defined %} one of {{ spec.enum | join(', ') }}{% endif %}

{%- endfor %}
{% endfor %}
{%- endif %}
{%- if ns.sys %}
<<SYS>>{{ ns.sys }}<</SYS>>
{% endif %}
{%- for message in loop_messages %}
    {%- if message.role == 'assistant' %}
<assistant>{% generation %}{{ message.content | trim }}{% endgeneration %}</assistant>
    {%- else %}
<{{ message.role }}>{{ message.content }}</{{ message.role }}>
    {%- endif %}
    {%- if loop.last %} (last of {{ loop.length }}){% endif %}
{%- endfor %}
{%- for m in messages[::-1] %}
    {%- if m.role != 'user' %}{% continue %}{% endif %}
Last user: {{ m.content.split()[:3] | join('|') }} / {{ m.content.upper() }} / {{ m.content.startswith('Hi') }} / {{ m.content.replace(' ', '_') }}
    {%- break %}
{%- endfor %}
Values: {{ none }} {{ true }} {{ false }} {{ 3 }} {{ 2.5 }} {{ 1e-7 }} {{ [1, 'two', none, 3.0] }} {{ {'a': 1, 'b': [true]} }}
{%- if extra_values is defined %}
Extra: {{ extra_values | tojson }}
ASCII: {{ extra_values | tojson(ensure_ascii=true) }}
Sorted: {{ extra_values | tojson(sort_keys=true) }}
Compact: {{ extra_values | tojson(separators=(',', ':')) }}
Indented: {{ extra_values | tojson(indent=4) }}
Printed: {{ extra_values }}
{%- endif %}
{%- set users = messages | selectattr('role', 'equalto', 'user') | list %}
Users: {{ users | length }} first={{ (users[0] if users else {}).get('content', '') | default('none', true) }}
{%- for key, val in {'k1': 'v1', 'skip': 0, 'k2': [1, 'a']}.items() if key != 'skip' %} {{ key }}={{ val | string }}{% endfor %}
Escapes: {{ 'line\\
continued \\x41\\101 \\u00e9 \\/ \\a|\\v|\\U0001F600' }}
Tail: {{ (messages[-1] | tojson)[:-1] }} same={{ messages[-1] == messages[-1] }}
{%- set messages = messages[1:] if messages | length > 1 else messages %}
Counts: users={{ ns.n_user }} last={{ ns.last_user }} total={{ messages | length }}
{%- if add_generation_prompt %}
<assistant>
{%- if enable_thinking is defined and enable_thinking is false %}<think>

</think>

{% endif %}
{%- endif %}
"""

CHATML_TOOLS_TEMPLATE = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\\n\\n' }}
    {%- endif %}
    {{- "You can call these functions. Their JSON schemas are listed in <tools></tools>:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\nAnswer a call as <tool_call>{\\"name\\": ..., \\"arguments\\": {...}}</tool_call>.<|im_end|>\\n" }}
{%- elif messages[0].role == 'system' %}
    {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
    {%- if message.role == 'system' and loop.first %}
    {%- elif message.role == 'tool' %}
        {%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}
        {%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- else %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and not enable_thinking %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- endif %}
{%- endif %}
"""

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city — «quoted», naïve café",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "City name, e.g. Zürich"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                    "days": {"type": "integer", "minimum": 1, "maximum": 7},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": 'Search the web for "text" </tools> & <b>more</b>',
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}, "limit": {"description": "max 10", "default": 5}},
                "required": ["query", "limit"],
            },
        },
    },
]

EXTRA_VALUES = {
    "z_first": 1,
    "text": 'Grüß "dich"\\n\t<tag> & ✓ 😀',
    "floats": [0.5, 1.0, 1e-05, 1.5e16, 123456.789, -0.0],
    "nested": {"b": None, "a": [True, False, {}], "empty": []},
    "control": "\u0001\u007f\u2028",
}


def msgs(*pairs):
    return [{"role": r, "content": c} for r, c in pairs]


MODEL_CASES = [
    ("user", msgs(("user", "Hello!")), False, None),
    ("user_generation_prompt", msgs(("user", "Hello!")), True, None),
    ("system_user", msgs(("system", "You are a terse assistant."), ("user", "What is 2+2?")), True, None),
    (
        "multi_turn",
        msgs(("user", "Hi there"), ("assistant", "Hello! How can I help?"), ("user", "Tell me a joke.")),
        True,
        None,
    ),
    (
        "system_multi_turn",
        msgs(("system", "Be brief."), ("user", "Name a color."), ("assistant", "Blue."), ("user", "Another.")),
        True,
        None,
    ),
    ("assistant_last", msgs(("user", "Say hi"), ("assistant", "hi")), False, None),
    ("non_ascii", msgs(("user", "Grüß dich! 你好 🤗 — ça va ? Привет, мир. 👨‍👩‍👧")), True, None),
    ("whitespace", msgs(("user", "  padded \n\n text\twith tabs  \n")), True, None),
    ("special_text_in_content", msgs(("user", "<|im_start|> and <start_of_turn> are just text here")), True, None),
    ("not_alternating", msgs(("user", "one"), ("user", "two")), True, None),
    ("extra_ignored", msgs(("user", "Hello!")), True, {"enable_thinking": False}),
]

FEATURE_CASES = [
    ("plain", msgs(("user", "Hi there, how are you today?")), True, None),
    (
        "system_turns",
        msgs(("system", "  Be helpful.  "), ("user", "Hi  there"), ("assistant", "  Hello!  "), ("user", "ßtraße now")),
        False,
        None,
    ),
    ("tools", msgs(("user", "Weather in Zürich?")), True, {"tools": TOOLS}),
    ("values", msgs(("user", "Hi")), True, {"extra_values": EXTRA_VALUES}),
    ("thinking_off", msgs(("user", "Quick answer")), True, {"enable_thinking": False}),
    ("thinking_on", msgs(("user", "Slow answer")), True, {"enable_thinking": True}),
]

CHATML_CASES = [
    ("no_tools", msgs(("system", "You are Qwen-like."), ("user", "Hello")), True, None),
    ("tools", msgs(("user", "What's the weather in Zürich?")), True, {"tools": TOOLS}),
    (
        "tools_system_responses",
        msgs(
            ("system", "Use tools."),
            ("user", "Weather?"),
            ("assistant", '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'),
            ("tool", '{"temp": 21}'),
            ("tool", '{"wind": "5 km/h"}'),
            ("user", "Thanks"),
        ),
        True,
        {"tools": TOOLS},
    ),
    ("thinking_off", msgs(("user", "2+2?")), True, {"enable_thinking": False}),
]


QWEN_CASES = MODEL_CASES + [
    ("thinking_off", msgs(("user", "2+2?")), True, {"enable_thinking": False}),
    ("thinking_on", msgs(("user", "2+2?")), True, {"enable_thinking": True}),
    (
        "history_with_think_trace",
        msgs(
            ("system", "You are helpful."),
            ("user", "What is 3*7?"),
            ("assistant", "<think>\n3 times 7 is 21.\n</think>\n\n21."),
            ("user", "And 4*8?"),
        ),
        True,
        None,
    ),
    (
        "last_assistant_with_think_trace",
        msgs(("user", "Hi"), ("assistant", "<think>\ngreet back\n</think>\n\nHello!")),
        False,
        None,
    ),
    ("tools", msgs(("user", "What's the weather in Zürich?")), True, {"tools": TOOLS}),
    (
        "tools_system_responses",
        msgs(
            ("system", "Use tools when needed."),
            ("user", "Weather in Paris?"),
            ("assistant", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'),
            ("tool", '{"temp": 21}'),
            ("tool", '{"wind": "5 km/h"}'),
        ),
        True,
        {"tools": TOOLS},
    ),
    ("system_only", msgs(("system", "Only a system turn.")), True, None),
    # Assistant tool calls as OpenAI / transformers write them, and tool turns answering them.
    (
        "tool_calls_in_messages",
        msgs(("system", "Use tools when needed."), ("user", "Weather in Paris and Zürich?"))
        + [
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": None}}},
                {"id": "call_2", "type": "function",
                 "function": {"name": "get_weather", "arguments": {"city": "Zürich", "days": 2}}}]},
            {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": '{"temp": 21}'},
            {"role": "tool", "tool_call_id": "call_2", "name": "get_weather", "content": '{"temp": 18}'},
        ],
        True,
        {"tools": TOOLS},
    ),
    (
        "tool_calls_with_text_then_user",
        msgs(("user", "Weather?"))
        + [
            {"role": "assistant", "content": "Let me check.", "tool_calls": [
                {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]},
            {"role": "tool", "content": "-3 °C"},
            {"role": "assistant", "content": "It is -3 °C in Oslo."},
            {"role": "user", "content": "Thanks"},
        ],
        True,
        {"tools": TOOLS},
    ),
]

LLAMA_CPP_TEMPLATES = {
    "qwen25": "Qwen-Qwen2.5-7B-Instruct.jinja",
    "qwen3": "Qwen-Qwen3-0.6B.jinja",
    "qwen35": "Qwen3.5-4B.jinja",
    "r1_distill_qwen": "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
}


def llama_cpp_template(file: str) -> str:
    import llamacpp_convert

    return (llamacpp_convert.llama_cpp_source(None) / "models" / "templates" / file).read_text()


def render_cases(tok, template: str, cases) -> list[dict]:
    out = []
    for name, messages, gen, extra in cases:
        case = {"name": name, "messages": messages, "add_generation_prompt": gen, "extra": extra}
        try:
            case["expected"] = tok.apply_chat_template(
                messages, chat_template=template, tokenize=False, add_generation_prompt=gen, **(extra or {})
            )
        except Exception as exc:  # the template's raise_exception
            case["error"] = str(exc)
        out.append(case)
    return out


def gguf_template(path: Path) -> str:
    import gguf

    field = gguf.GGUFReader(str(path)).fields["tokenizer.chat_template"]
    return field.contents()


def main() -> None:
    from transformers import AutoTokenizer

    OUT_DIR.mkdir(parents=True, exist_ok=True)
    versions = {
        "transformers": importlib.metadata.version("transformers"),
        "jinja2": importlib.metadata.version("jinja2"),
    }
    smol = AutoTokenizer.from_pretrained(str(MODELS), gguf_file=SMOLLM2)
    gemma = AutoTokenizer.from_pretrained(str(MODELS), gguf_file=GEMMA3)
    jobs = [
        ("smollm2", f"tokenizer.chat_template of {SMOLLM2}", smol, gguf_template(MODELS / SMOLLM2), MODEL_CASES),
        ("gemma3", f"Gemma 3 instruct template; BOS/EOS of {GEMMA3}", gemma, GEMMA3_TEMPLATE, MODEL_CASES),
        ("features", "written for the tests; BOS/EOS of SmolLM2", smol, FEATURES_TEMPLATE, FEATURE_CASES),
        ("chatml_tools", "written for the tests; BOS/EOS of SmolLM2", smol, CHATML_TOOLS_TEMPLATE, CHATML_CASES),
    ]
    for name, file in LLAMA_CPP_TEMPLATES.items():
        source = f"llama.cpp models/templates/{file} (llama-cpp-python sdist); BOS/EOS of SmolLM2"
        jobs.append((name, source, smol, llama_cpp_template(file), QWEN_CASES))
    for name, source, tok, template, cases in jobs:
        doc = {
            "name": name,
            "source": source,
            "versions": versions,
            "bos_token": tok.bos_token,
            "eos_token": tok.eos_token,
            "template": template,
            "cases": render_cases(tok, template, cases),
        }
        path = OUT_DIR / f"{name}.json"
        path.write_text(json.dumps(doc, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        n_err = sum("error" in c for c in doc["cases"])
        print(f"{name}: {len(doc['cases'])} cases ({n_err} errors) -> {path}")


if __name__ == "__main__":
    main()
