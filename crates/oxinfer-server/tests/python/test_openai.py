"""`oxinfer serve` over real HTTP on loopback, driven by the official `openai` Python client
(and urllib for raw bodies). The reference for generated text is the
`oxinfer run` CLI at temperature 0 (itself checked against transformers and llama.cpp);
JSON output is checked with `json` and the `jsonschema` package."""

import concurrent.futures as cf
import json
import subprocess
import threading
import time

import urllib.error
import urllib.request

import jsonschema
import openai
import pytest

from conftest import BIN, MODEL

MODEL_NAME = "SmolLM2-135M-Instruct.Q4_1"
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 40},
                "unit": {"enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
        },
    },
}


class Raw:
    """A plain HTTP answer: status, headers, body text."""

    def __init__(self, status, headers, text):
        self.status_code, self.headers, self.text = status, headers, text

    def json(self):
        return json.loads(self.text)


def raw(method, url, body=None, headers=None):
    """One HTTP request with urllib (any status returned, not raised)."""
    if isinstance(body, (dict, list)):
        body = json.dumps(body).encode()
        headers = {"content-type": "application/json", **(headers or {})}
    elif isinstance(body, str):
        body = body.encode()
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return Raw(r.status, r.headers, r.read().decode())
    except urllib.error.HTTPError as e:
        return Raw(e.code, e.headers, e.read().decode())


def client(server, key="none"):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0, timeout=120)


def cli_greedy(prompt, n):
    """What `oxinfer run` prints for one user message at temperature 0 (it ends the text with
    a newline of its own)."""
    out = subprocess.run(
        [BIN, "run", "-m", MODEL, "-p", prompt, "--temp", "0", "--max-tokens", str(n), "-t", "2"],
        capture_output=True, text=True, check=True,
    )
    assert out.stdout.endswith("\n")
    return out.stdout[:-1]


def metric(server, name, key=None):
    headers = {"authorization": f"Bearer {key}"} if key else None
    text = raw("GET", server.url + "/metrics", headers=headers).text
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.split()[-1])
    raise KeyError(name)


def test_health_and_models(server):
    assert raw("GET", server.url + "/health").json() == {"status": "ok"}
    models = client(server).models.list()
    assert [m.id for m in models.data] == [MODEL_NAME]


def test_chat_matches_cli_and_stream_matches_whole(server):
    prompt = "What is the capital of France?"
    c = client(server)
    r = c.chat.completions.create(
        model=MODEL_NAME, messages=[{"role": "user", "content": prompt}],
        temperature=0, max_tokens=24,
    )
    text = r.choices[0].message.content
    assert text == cli_greedy(prompt, 24)
    assert r.choices[0].finish_reason in ("stop", "length")
    assert r.usage.completion_tokens <= 24
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens

    chunks = list(c.chat.completions.create(
        model=MODEL_NAME, messages=[{"role": "user", "content": prompt}],
        temperature=0, max_tokens=24, stream=True, stream_options={"include_usage": True},
    ))
    assert chunks[0].choices[0].delta.role == "assistant"
    streamed = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert streamed == text
    finals = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    assert finals == [r.choices[0].finish_reason]
    assert chunks[-1].usage.completion_tokens == r.usage.completion_tokens
    # The same conversation again reuses the cached prompt.
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens == r.usage.prompt_tokens - 1


def test_completions_stop_and_logprobs(server):
    c = client(server)
    r = c.completions.create(model=MODEL_NAME, prompt="One, two, three,", max_tokens=12,
                             temperature=0, stop=[" six"])
    assert " six" not in r.choices[0].text
    whole = c.completions.create(model=MODEL_NAME, prompt="The sky is", max_tokens=10,
                                 temperature=0, echo=True, logprobs=2)
    assert whole.choices[0].text.startswith("The sky is")
    assert len(whole.choices[0].logprobs.tokens) == whole.usage.completion_tokens
    parts = list(c.completions.create(model=MODEL_NAME, prompt="The sky is", max_tokens=10,
                                      temperature=0, stream=True))
    assert "The sky is" + "".join(p.choices[0].text for p in parts) == whole.choices[0].text
    r = c.chat.completions.create(
        model=MODEL_NAME, messages=[{"role": "user", "content": "Say yes."}],
        temperature=0, max_tokens=4, logprobs=True, top_logprobs=3,
    )
    lp = r.choices[0].logprobs.content
    assert len(lp) == r.usage.completion_tokens
    for e in lp:
        assert len(e.top_logprobs) == 3
        # Greedy picks the most likely token.
        assert e.top_logprobs[0].token == e.token and e.logprob <= 0


def test_tool_call_forced_streamed_and_fed_back(server):
    c = client(server)
    msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
    r = c.chat.completions.create(model=MODEL_NAME, messages=msgs, tools=[WEATHER_TOOL],
                                  tool_choice="required", temperature=0, max_tokens=60)
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls"
    call = ch.message.tool_calls[0]
    assert call.function.name == "get_weather"
    args = json.loads(call.function.arguments)
    jsonschema.validate(args, WEATHER_TOOL["function"]["parameters"])

    chunks = list(c.chat.completions.create(
        model=MODEL_NAME, messages=msgs, tools=[WEATHER_TOOL],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        temperature=0, max_tokens=60, stream=True))
    deltas = [tc for ch in chunks for tc in (ch.choices[0].delta.tool_calls or [])]
    assert [d.index for d in deltas] == [0]
    assert deltas[0].function.name == "get_weather"
    assert json.loads(deltas[0].function.arguments) == args
    assert chunks[-1].choices[0].finish_reason == "tool_calls"

    # The call and its result go back in; the model answers in text.
    msgs += [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": call.id, "type": "function",
             "function": {"name": "get_weather", "arguments": call.function.arguments}}]},
        {"role": "tool", "tool_call_id": call.id, "content": '{"temperature": 21, "sky": "clear"}'},
    ]
    r = c.chat.completions.create(model=MODEL_NAME, messages=msgs, tools=[WEATHER_TOOL],
                                  tool_choice="none", temperature=0, max_tokens=20)
    assert r.choices[0].message.content
    assert r.usage.prompt_tokens > 0


@pytest.mark.parametrize("prompt", [
    "Describe a person as JSON.",
    "Invent a character for a story.",
])
def test_json_schema_output_parses_and_validates(server, prompt):
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 24},
            "age": {"type": "integer"},
            "color": {"enum": ["red", "green", "blue"]},
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 3},
        },
        "required": ["name", "age", "color"],
    }
    c = client(server)
    for temperature, seed in [(0, 0), (0.9, 1), (0.9, 2)]:
        r = c.chat.completions.create(
            model=MODEL_NAME, messages=[{"role": "user", "content": prompt}],
            temperature=temperature, seed=seed, max_tokens=120,
            response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": schema}},
        )
        assert r.choices[0].finish_reason == "stop", r.choices[0].message.content
        jsonschema.validate(json.loads(r.choices[0].message.content), schema)
    r = c.chat.completions.create(
        model=MODEL_NAME, messages=[{"role": "user", "content": "Three colours as JSON."}],
        temperature=0, max_tokens=80, response_format={"type": "json_object"})
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(r.choices[0].message.content), dict)


HARD_SCHEMAS = [
    {"type": "object", "properties": {
        "code": {"type": "string", "pattern": "^[A-Z]{2,4}-[0-9]{3}$"},
        "word": {"type": "string", "pattern": "^(cat|dog)s?$"},
        "free": {"type": "string", "pattern": "ab", "maxLength": 12},
        "short": {"type": "string", "minLength": 2, "maxLength": 5}},
     "required": ["code", "word", "free", "short"]},
    {"type": "object", "properties": {
        "day": {"type": "string", "format": "date"},
        "at": {"type": "string", "format": "date-time"},
        "time": {"type": "string", "format": "time"},
        "mail": {"type": "string", "format": "email", "maxLength": 30},
        "id": {"type": "string", "format": "uuid"},
        "ip": {"type": "string", "format": "ipv4"}},
     "required": ["day", "at", "time", "mail", "id", "ip"]},
    {"type": "object", "properties": {
        "age": {"type": "integer", "minimum": 18, "maximum": 65},
        "big": {"type": "integer", "exclusiveMinimum": 1000, "maximum": 99999},
        "ratio": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
        "temp": {"type": "number", "minimum": -40.5, "maximum": -3.25},
        "scores": {"type": "array", "items": {"type": "integer", "minimum": 1, "maximum": 5},
                   "minItems": 2, "maxItems": 4}},
     "required": ["age", "big", "ratio", "temp", "scores"]},
    {"allOf": [
        {"type": "object", "properties": {"name": {"type": "string", "maxLength": 10}},
         "required": ["name"]},
        {"properties": {"level": {"type": "integer", "minimum": 1, "maximum": 3}},
         "required": ["level"]}]},
    {"$defs": {"node": {"type": "object", "properties": {
        "v": {"type": "integer", "minimum": 0, "maximum": 99},
        "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}},
        "required": ["v"], "additionalProperties": False}},
     "$ref": "#/$defs/node"},
    {"type": "object", "properties": {"item": {"anyOf": [
        {"type": "object", "properties": {"kind": {"type": "string", "maxLength": 8},
                                          "n": {"type": "integer"}},
         "required": ["kind", "n"], "additionalProperties": False},
        {"type": "object", "properties": {"kind": {"type": "string", "maxLength": 8},
                                          "ok": {"type": "boolean"}},
         "required": ["kind", "ok"], "additionalProperties": False}]}},
     "required": ["item"]},
    # Tuples (prefixItems + items for the rest), multipleOf (integers, and decimals that
    # validators check by dividing doubles), hostname and uri formats.
    {"type": "object", "properties": {
        "pair": {"type": "array", "prefixItems": [
            {"type": "integer", "minimum": 0, "maximum": 9}, {"enum": ["x", "y"]}],
            "items": {"type": "boolean"}, "minItems": 2, "maxItems": 4},
        "fixed": {"type": "array", "prefixItems": [{"type": "string", "maxLength": 6},
                                                   {"type": "number"}], "items": False}},
     "required": ["pair", "fixed"]},
    {"type": "object", "properties": {
        "week": {"type": "integer", "multipleOf": 7},
        "five": {"type": "integer", "multipleOf": 5, "minimum": 11, "maximum": 99},
        "price": {"type": "number", "multipleOf": 0.01, "minimum": 0, "maximum": 100},
        "half": {"type": "number", "multipleOf": 0.5},
        "tenth": {"type": "number", "multipleOf": 0.1, "exclusiveMaximum": 10}},
     "required": ["week", "five", "price", "half", "tenth"]},
    # oneOf: a discriminated union (disjoint by a const), and enums whose overlap is dropped.
    {"type": "object", "properties": {
        "pet": {"oneOf": [
            {"type": "object", "properties": {"kind": {"const": "cat"},
                                              "lives": {"type": "integer", "minimum": 1,
                                                        "maximum": 9}},
             "required": ["kind", "lives"]},
            {"type": "object", "properties": {"kind": {"const": "dog"},
                                              "good": {"type": "boolean"}},
             "required": ["kind", "good"]}]},
        "tag": {"oneOf": [{"enum": ["a", "b", 1]}, {"enum": ["b", 1.0, "c"]}]}},
     "required": ["pet", "tag"]},
    # not: types taken out, values taken out of enums and booleans.
    {"type": "object", "properties": {
        "num": {"not": {"type": ["object", "array", "string", "boolean", "null"]}},
        "col": {"enum": ["red", "green", "blue"], "not": {"const": "green"}},
        "yes": {"type": "boolean", "not": {"const": False}},
        "opt": {"type": ["integer", "null"], "not": {"type": "null"}}},
     "required": ["num", "col", "yes", "opt"]},
    # uniqueItems over enums / booleans and null (the second must use all three values).
    {"type": "object", "properties": {
        "tags": {"type": "array", "uniqueItems": True, "minItems": 2, "maxItems": 5,
                 "items": {"enum": ["red", "green", "blue", 1, 1.0, 2]}},
        "all": {"type": "array", "uniqueItems": True, "minItems": 3,
                "items": {"type": ["boolean", "null"]}}},
     "required": ["tags", "all"]},
    # patternProperties: a map whose keys follow one pattern.
    {"type": "object", "properties": {
        "scores": {"type": "object", "patternProperties": {
            "^[a-z]{2,8}$": {"type": "integer", "minimum": 0, "maximum": 100}},
            "additionalProperties": False}},
     "required": ["scores"]},
    {"type": "object", "properties": {
        "host": {"type": "string", "format": "hostname", "maxLength": 40},
        "url": {"type": "string", "format": "uri", "maxLength": 60}},
     "required": ["host", "url"]},
]


def test_json_schema_keywords_always_validate(server):
    """Patterns, formats, numeric bounds, allOf, recursive $ref and overlapping anyOf, sampled
    at temperature 1.5: every finished output validates (jsonschema with its format checker)."""
    c = client(server)

    def one(args):
        schema, seed = args
        r = c.chat.completions.create(
            model=MODEL_NAME, messages=[{"role": "user", "content": "Fill in this record."}],
            temperature=1.5, seed=seed, max_tokens=400,
            response_format={"type": "json_schema", "json_schema": {"name": "r", "schema": schema}},
        )
        return schema, r.choices[0]

    jobs = [(schema, seed) for schema in HARD_SCHEMAS for seed in range(4)]
    finished = 0
    with cf.ThreadPoolExecutor(8) as pool:
        for schema, choice in pool.map(one, jobs):
            if choice.finish_reason == "length":
                continue  # cut by max_tokens: may be incomplete, as documented
            assert choice.finish_reason == "stop"
            finished += 1
            validator = jsonschema.Draft202012Validator(
                schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
            validator.validate(json.loads(choice.message.content))
    assert finished >= len(jobs) * 3 // 4, f"only {finished} of {len(jobs)} finished"


@pytest.mark.parametrize("schema,word", [
    ({"type": "string", "not": {"pattern": "x"}}, "not"),
    ({"type": "string", "format": "ipv6"}, "ipv6"),
    ({"type": "string", "pattern": "(?=a)b"}, "lookahead"),
    ({"type": "number", "multipleOf": 1e-20}, "multipleOf"),
    ({"oneOf": [{"type": "integer"}, {"type": "number", "maximum": 5}]}, "oneOf"),
    ({"type": "array", "items": {"type": "string"}, "uniqueItems": True}, "uniqueItems"),
    ({"type": "object", "patternProperties": {"^a": {}, "^b": {}}}, "patternProperties"),
    ({"type": "array", "items": {"enum": [1, 2]}, "uniqueItems": True, "minItems": 3},
     "uniqueItems"),
])
def test_unsupported_schema_is_400_naming_the_keyword(server, schema, word):
    with pytest.raises(openai.BadRequestError) as e:
        client(server).chat.completions.create(
            model=MODEL_NAME, messages=[{"role": "user", "content": "x"}], max_tokens=5,
            response_format={"type": "json_schema", "json_schema": {"name": "r", "schema": schema}})
    assert word in str(e.value)


def test_n_choices_whole_and_streamed(server):
    c = client(server)
    msgs = [{"role": "user", "content": "Name a fruit."}]
    one = c.chat.completions.create(model=MODEL_NAME, messages=msgs, temperature=0, max_tokens=12)
    three = c.chat.completions.create(model=MODEL_NAME, messages=msgs, temperature=0,
                                      max_tokens=12, n=3)
    assert [ch.index for ch in three.choices] == [0, 1, 2]
    for ch in three.choices:
        assert ch.message.content == one.choices[0].message.content
    assert three.usage.completion_tokens == 3 * one.usage.completion_tokens
    assert three.usage.prompt_tokens == one.usage.prompt_tokens
    texts, finishes = {0: "", 1: ""}, {}
    stream = c.chat.completions.create(model=MODEL_NAME, messages=msgs, temperature=0.8, seed=3,
                                       max_tokens=12, n=2, stream=True)
    for chunk in stream:
        for ch in chunk.choices:
            texts[ch.index] += ch.delta.content or ""
            if ch.finish_reason:
                finishes[ch.index] = ch.finish_reason
    assert set(finishes) == {0, 1}
    assert all(texts.values())
    with pytest.raises(openai.BadRequestError):
        c.chat.completions.create(model=MODEL_NAME, messages=msgs, max_tokens=2, n=17)


def test_eight_concurrent_streams_match_each_alone(server):
    prompts = [f"Write one sentence about the number {i}." for i in range(8)]
    c = client(server)

    def run(p):
        chunks = c.chat.completions.create(
            model=MODEL_NAME, messages=[{"role": "user", "content": p}],
            temperature=0, max_tokens=24, stream=True)
        return "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)

    # Together first, on slots that never saw these prompts (batched, chunked prefill), then
    # each alone (its prompt then comes from a slot's cache but for the last token).
    with cf.ThreadPoolExecutor(8) as ex:
        together = list(ex.map(run, prompts))
    alone = [run(p) for p in prompts]
    assert together == alone
    assert all(alone)


def test_cancelled_stream_frees_its_slot(server):
    c = client(server)
    before = metric(server, "oxinfer_requests_cancelled_total")
    stream = c.chat.completions.create(
        model=MODEL_NAME, messages=[{"role": "user", "content": "Tell me a very long story."}],
        temperature=0.8, max_tokens=2000, stream=True)
    for i, _ in enumerate(stream):
        if i == 3:
            break
    stream.close()
    deadline = time.time() + 10
    while time.time() < deadline:
        if metric(server, "oxinfer_active_slots") == 0:
            break
        time.sleep(0.05)
    assert metric(server, "oxinfer_active_slots") == 0
    assert metric(server, "oxinfer_requests_cancelled_total") == before + 1


def test_bad_json_is_400_with_openai_error(server):
    r = raw("POST", server.url + "/v1/chat/completions", b'{"messages": [',
            {"content-type": "application/json"})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["message"]
    r = raw("POST", server.url + "/v1/chat/completions", {"model": MODEL_NAME})
    assert r.status_code == 400 and "messages" in r.json()["error"]["message"]


def test_any_model_name_is_answered_and_named_in_the_response(server):
    """Clients send their own default model name (issue 17): a single-model server answers
    it, and `model` in the response says what served it (the 404 needs --strict-model-names,
    test_operations.py)."""
    r = client(server).chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
    assert r.model == MODEL_NAME
    r = client(server).completions.create(model="llama3", prompt="Hi", max_tokens=2)
    assert r.model == MODEL_NAME


def test_prompt_too_long_says_by_how_much(server, small_server):
    text = "word " * 400
    # The big server counts the prompt's tokens.
    n = client(server).chat.completions.create(
        model=MODEL_NAME, messages=[{"role": "user", "content": text}], max_tokens=1,
        temperature=0).usage.prompt_tokens
    with pytest.raises(openai.BadRequestError) as e:
        client(small_server, "test-key").chat.completions.create(
            model=MODEL_NAME, messages=[{"role": "user", "content": text}], max_tokens=1)
    assert f"by {n - 256} tokens" in e.value.body["message"], e.value.body


def test_body_too_large_is_413(small_server):
    body = json.dumps({"model": MODEL_NAME, "messages": [{"role": "user", "content": "x" * 70000}]})
    r = raw("POST", small_server.url + "/v1/chat/completions", body,
            {"authorization": "Bearer test-key", "content-type": "application/json"})
    assert r.status_code == 413
    assert r.json()["error"]["message"]


def test_wrong_key_is_401_and_health_is_open(small_server):
    with pytest.raises(openai.AuthenticationError) as e:
        client(small_server, "wrong").models.list()
    assert e.value.status_code == 401
    assert raw("GET", small_server.url + "/v1/models").status_code == 401
    assert raw("GET", small_server.url + "/health").status_code == 200
    assert client(small_server, "test-key").models.list().data[0].id == MODEL_NAME


def test_full_queue_is_503_with_retry_after(small_server):
    c = client(small_server, "test-key")
    long = dict(model=MODEL_NAME, messages=[{"role": "user", "content": "Tell a long story."}],
                max_tokens=200, temperature=0.8, stream=True)
    first = c.chat.completions.create(**long)
    for chunk in first:  # the first generated text: it holds the only slot
        if chunk.choices and chunk.choices[0].delta.content:
            break
    second = c.chat.completions.create(**long)  # waits in the queue of one
    r = raw("POST", small_server.url + "/v1/chat/completions", {**long, "stream": False},
            {"authorization": "Bearer test-key"})
    assert r.status_code == 503
    assert int(r.headers["retry-after"]) >= 1
    assert r.json()["error"]["code"] == "queue_full"
    first.close()
    second.close()


def wait_idle(server, key):
    deadline = time.time() + 20
    while time.time() < deadline:
        if (metric(server, "oxinfer_active_slots", key) == 0
                and metric(server, "oxinfer_queue_length", key) == 0):
            return
        time.sleep(0.05)
    raise AssertionError("the server did not go idle")


def test_n_choices_are_admitted_all_or_none(small_server):
    """One slot and a queue of one: n = 2 fits an idle server (one runs, one waits); while the
    slot is busy the queue cannot take both, so neither is submitted (503, nothing queued,
    nothing cancelled), and one plain request still takes the free queue place."""
    key = "test-key"
    c = client(small_server, key)
    msgs = [{"role": "user", "content": "Name a colour."}]
    wait_idle(small_server, key)
    two = c.chat.completions.create(model=MODEL_NAME, messages=msgs, max_tokens=4, n=2,
                                    temperature=0)
    assert [ch.index for ch in two.choices] == [0, 1]
    with pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(model=MODEL_NAME, messages=msgs, max_tokens=4, n=3)
    assert "--parallel plus --queue" in e.value.body["message"]

    wait_idle(small_server, key)
    cancelled = metric(small_server, "oxinfer_requests_cancelled_total", key)
    long = dict(model=MODEL_NAME, messages=[{"role": "user", "content": "Tell a long story."}],
                max_tokens=200, temperature=0.8, stream=True)
    first = c.chat.completions.create(**long)
    for chunk in first:  # generating: it holds the only slot
        if chunk.choices and chunk.choices[0].delta.content:
            break
    r = raw("POST", small_server.url + "/v1/chat/completions",
            {"model": MODEL_NAME, "messages": msgs, "max_tokens": 4, "n": 2},
            {"authorization": f"Bearer {key}"})
    assert r.status_code == 503, r.text
    assert int(r.headers["retry-after"]) >= 1
    assert r.json()["error"]["code"] == "queue_full"
    assert metric(small_server, "oxinfer_queue_length", key) == 0
    assert metric(small_server, "oxinfer_active_slots", key) == 1
    assert metric(small_server, "oxinfer_requests_cancelled_total", key) == cancelled
    # The place the refused pair did not take is still free for one request.
    second = c.chat.completions.create(**long)
    assert metric(small_server, "oxinfer_queue_length", key) == 1
    first.close()
    second.close()


def test_still_healthy_after_everything(server, small_server):
    for s, key in [(server, "none"), (small_server, "test-key")]:
        assert raw("GET", s.url + "/health").status_code == 200
        deadline = time.time() + 20
        while True:
            try:
                r = client(s, key).chat.completions.create(
                    model=MODEL_NAME, messages=[{"role": "user", "content": "Hi"}], max_tokens=4)
                break
            except openai.APIStatusError as e:  # the 503 test's streams may still be draining
                assert e.status_code == 503 and time.time() < deadline
                time.sleep(0.2)
        assert r.choices[0].message.content is not None
    assert s.proc.poll() is None
