#!/usr/bin/env python3
"""Generates the tokenizer fixtures under tests/fixtures/tokenizers/.

Two small tokenizers are trained from a local corpus (the Markdown files under
/work/shared/reference and the corpus text embedded below), then a set of OpenAI-style
requests is turned into token ids the way vLLM does it:

* completions: every prompt string is encoded with add_special_tokens=True; ids of a list of
  prompts are concatenated (the order the EPP keys them);
* chat: messages are normalised as vLLM's chat_utils does (string vs. openai content
  format, tool-call arguments parsed from JSON strings), the chat template is rendered with a
  jinja2 sandbox configured like transformers' (trim_blocks, lstrip_blocks, loopcontrols,
  tojson without HTML escaping, raise_exception), then encoded with add_special_tokens=False
  (or the request's add_special_tokens).

Requirements: pip install tokenizers==0.22.2 jinja2. No network access to the model hub.
Usage: python3 tools/gen_tokenizer_fixtures.py [--corpus DIR] [--out DIR]
"""

import argparse
import json
import re
from pathlib import Path

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

EMBEDDED_CORPUS = """
The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs.
What is the weather like in Paris today? It is sunny, 21 degrees Celsius, with a light wind.
Summarise the following document in three bullet points, then list open questions.
def add(a, b):\n    return a + b\n\nclass Point:\n    def __init__(self, x, y):\n        self.x = x\n
{"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
Grüße aus München! Ça va très bien, merci. ¿Dónde está la biblioteca? Ελληνικά κείμενα.
日本語のテキストも少し含めます。中文文本也包括在内。한국어 문장도 있습니다. 🙂🚀
Numbers: 0 1 2 3 4 5 6 7 8 9 10 42 100 2024 3.14159 1e-5 -17 +8
You are a helpful assistant. Answer concisely and cite your sources.
"""

LLAMA_SPECIALS = [
    "<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>", "<|reserved_special_token_1|>",
    "<|finetune_right_pad_id|>", "<|step_id|>", "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>",
    "<|eot_id|>", "<|python_tag|>",
]
LLAMA_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
MISTRAL_SPECIALS = [
    "<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
    "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[IMG]",
]

# Written for these fixtures in the style of Llama 3.1's template (string content format).
LLAMA_TEMPLATE = r"""{{- bos_token }}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_text = messages[0]['content'] | trim %}
    {%- set rest = messages[1:] %}
{%- else %}
    {%- set system_text = "" %}
    {%- set rest = messages %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{%- if tools is not none %}
    {{- "Environment: ipython\n" }}
{%- endif %}
{{- "Knowledge cutoff: " + (knowledge_cutoff | default("March 2024")) + "\n\n" }}
{%- if tools is not none %}
    {{- "You can call the functions below. Answer with a JSON object {\"name\": function name, \"parameters\": arguments}.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=2) }}
        {{- "\n\n" }}
    {%- endfor %}
{%- endif %}
{{- system_text }}
{{- "<|eot_id|>" }}
{%- for message in rest %}
    {%- if message.role == 'assistant' and message.tool_calls is defined and message.tool_calls %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
        {%- for call in message.tool_calls %}
            {{- '{"name": "' + call.function.name + '", "parameters": ' + (call.function.arguments | tojson) + '}' }}
        {%- endfor %}
        {{- "<|eom_id|>" }}
    {%- elif message.role == 'tool' or message.role == 'ipython' %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\n\n" }}
        {%- if message.content is mapping or message.content is iterable and message.content is not string %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- else %}
        {{- '<|start_header_id|>' + message.role + '<|end_header_id|>\n\n' + message.content | trim + '<|eot_id|>' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
"""

# Written for these fixtures in the style of Mistral's templates (openai content format:
# the template iterates message content parts). Named list form: default + tool_use.
MISTRAL_BODY = r"""
{%- if messages[0].role == 'system' %}
    {%- set system_message = messages[0].content[0].text %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}
{%- set ns = namespace(last_user=-1) %}
{%- for message in loop_messages %}
    {%- if message.role == 'user' %}{% set ns.last_user = loop.index0 %}{% endif %}
{%- endfor %}
{%- if loop_messages[0].role != 'user' %}
    {{- raise_exception('The first non-system message must come from the user') }}
{%- endif %}
{{- bos_token }}
{%- for message in loop_messages %}
    {%- if message.role == 'user' %}
        {%- if TOOLS_BLOCK and loop.index0 == ns.last_user %}
            {{- '[AVAILABLE_TOOLS] ' + tools | tojson + '[/AVAILABLE_TOOLS]' }}
        {%- endif %}
        {{- '[INST] ' }}
        {%- if loop.index0 == ns.last_user and system_message is defined %}
            {{- system_message.strip() + '\n\n' }}
        {%- endif %}
        {%- for part in message.content %}
            {%- if part.type == 'text' %}
                {{- part.text }}
            {%- elif part.type == 'image' %}
                {{- '[IMG]' }}
            {%- endif %}
            {%- if not loop.last %}{{ ' ' }}{% endif %}
        {%- endfor %}
        {{- ' [/INST]' }}
    {%- elif message.role == 'assistant' %}
        {%- if message.tool_calls is defined and message.tool_calls %}
            {{- '[TOOL_CALLS] [' }}
            {%- for call in message.tool_calls %}
                {{- '{"name": "' + call.function.name + '", "arguments": ' + call.function.arguments | tojson + ', "id": "' + call.id + '"}' }}
                {%- if not loop.last %}{{ ', ' }}{% endif %}
            {%- endfor %}
            {{- ']' + eos_token }}
        {%- else %}
            {{- ' ' }}
            {%- for part in message.content %}{{ part.text }}{% endfor %}
            {{- eos_token }}
        {%- endif %}
    {%- elif message.role == 'tool' %}
        {%- set text = message.content | map(attribute='text') | join('') %}
        {{- '[TOOL_RESULTS] {"content": ' + text | tojson + ', "call_id": "' + message.tool_call_id + '"}[/TOOL_RESULTS]' }}
    {%- else %}
        {{- raise_exception('Unsupported role ' + message.role) }}
    {%- endif %}
{%- endfor %}
"""
MISTRAL_TEMPLATES = [
    {"name": "default", "template": MISTRAL_BODY.replace("TOOLS_BLOCK", "false")},
    {"name": "tool_use", "template": MISTRAL_BODY.replace("TOOLS_BLOCK", "tools is not none")},
]


def read_corpus(corpus_dir):
    texts = [EMBEDDED_CORPUS] * 20
    if corpus_dir and Path(corpus_dir).is_dir():
        for p in sorted(Path(corpus_dir).glob("*.md")):
            texts.append(p.read_text(encoding="utf-8"))
    return texts


def build_llama(corpus):
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=3000, min_frequency=2, special_tokens=[],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in LLAMA_SPECIALS])
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(
            single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|>:1 $B:1",
            special_tokens=[("<|begin_of_text|>", bos)],
        ),
    ])
    config = {
        "bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "clean_up_tokenization_spaces": True,
        "model_max_length": 131072, "tokenizer_class": "PreTrainedTokenizerFast", "chat_template": LLAMA_TEMPLATE,
    }
    return tok, config, "string"


def build_mistral(corpus):
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=False)
    tok.decoder = decoders.Sequence([
        decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0),
    ])
    trainer = trainers.BpeTrainer(vocab_size=2500, min_frequency=2, special_tokens=["<unk>", "<s>", "</s>"],
                                  show_progress=False)
    tok.train_from_iterator(corpus, trainer)
    # Byte-fallback pieces are ordinary vocabulary entries <0x00>..<0xFF>, as in SentencePiece models.
    data = json.loads(tok.to_str())
    vocab = data["model"]["vocab"]
    next_id = max(vocab.values()) + 1
    for b in range(256):
        piece = f"<0x{b:02X}>"
        if piece not in vocab:
            vocab[piece] = next_id
            next_id += 1
    tok = Tokenizer.from_str(json.dumps(data))
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in MISTRAL_SPECIALS])
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B:1", special_tokens=[("<s>", tok.token_to_id("<s>"))],
    )
    added = lambda c: {"content": c, "lstrip": False, "normalized": False, "rstrip": False,
                       "single_word": False, "__type": "AddedToken"}
    config = {
        "bos_token": added("<s>"), "eos_token": added("</s>"), "unk_token": added("<unk>"),
        "add_bos_token": True, "model_max_length": 32768, "tokenizer_class": "LlamaTokenizer",
        "chat_template": MISTRAL_TEMPLATES,
    }
    return tok, config, "openai"


# --- vLLM-like chat handling -------------------------------------------------------------

def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def jinja_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


def token_str(value):
    return value["content"] if isinstance(value, dict) else value


def select_template(config, tools):
    t = config["chat_template"]
    if isinstance(t, str):
        return t
    named = {e["name"]: e["template"] for e in t}
    if tools is not None and "tool_use" in named:
        return named["tool_use"]
    return named["default"]


def normalise_messages(messages, content_format):
    out = []
    for m in messages:
        content = m.get("content")
        parts = [] if content is None else ([{"type": "text", "text": content}] if isinstance(content, str) else content)
        if content_format == "string":
            texts = [p["text"] for p in parts if p.get("type") in ("text", "input_text")]
            new_content = "\n".join(texts)
        else:
            new_content = []
            for p in parts:
                kind = p.get("type")
                if kind in ("text", "input_text"):
                    new_content.append({"type": "text", "text": p["text"]})
                elif kind in ("image_url", "input_image", "image_pil", "image_embeds"):
                    new_content.append({"type": "image"})
        msg = {"role": m["role"], "content": new_content}
        if isinstance(m.get("name"), str):
            msg["name"] = m["name"]
        if m["role"] == "assistant" and m.get("tool_calls"):
            calls = json.loads(json.dumps(m["tool_calls"]))
            for c in calls:
                args = c.get("function", {}).get("arguments")
                if isinstance(args, str):
                    c["function"]["arguments"] = json.loads(args)
            msg["tool_calls"] = calls
        if m["role"] == "tool" and "tool_call_id" in m:
            msg["tool_call_id"] = m["tool_call_id"]
        out.append(msg)
    return out


# transformers' marker for continue_final_message (render_jinja_template).
CONTINUE_TAG = "CONTINUE_FINAL_MESSAGE_TAG "


def detect_content_format(template):
    """vLLM's detection, for the simple templates used here: a loop over a message's content."""
    loop = re.search(r"\{%-?\s*for\s+\w+\s+in\s+\w+(\.content|\[['\"]content['\"]\])", template)
    return "openai" if loop else "string"


def open_final_message(messages):
    """Appends transformers' tag to the final message's text; returns that text without it."""
    content = messages[-1]["content"]
    if isinstance(content, list):
        for block in reversed(content):
            if "text" in block:
                final = block["text"]
                block["text"] = final + CONTINUE_TAG
                return final
        raise jinja2.exceptions.TemplateError("no text to continue in the final message")
    messages[-1]["content"] = content + CONTINUE_TAG
    return content


def cut_at_final_message(rendered, final):
    """transformers: cut at the tag, right-stripped when the template trimmed its space."""
    tag = CONTINUE_TAG.strip()
    if final.strip() not in rendered or tag not in rendered:
        raise jinja2.exceptions.TemplateError("the final message does not appear in the chat")
    at = rendered.rindex(tag)
    if rendered[at:at + len(CONTINUE_TAG)] == CONTINUE_TAG:
        return rendered[:at]
    return rendered[:at].rstrip()


def render_chat(config, content_format, body):
    tools = body.get("tools")
    template = body.get("chat_template") or select_template(config, tools)
    if "chat_template" in body:
        content_format = detect_content_format(template)
    messages = normalise_messages(body["messages"], content_format)
    final = open_final_message(messages) if body.get("continue_final_message") else None
    context = {
        "messages": messages,
        "tools": tools,
        "documents": None,
        "add_generation_prompt": body.get("add_generation_prompt", True),
    }
    for key in ("bos_token", "eos_token", "unk_token", "pad_token"):
        if key in config:
            context[key] = token_str(config[key])
    context.update(body.get("chat_template_kwargs") or {})
    rendered = jinja_env().from_string(template).render(**context)
    return rendered if final is None else cut_at_final_message(rendered, final)


def expected_ids(tok, config, content_format, api, body):
    if api == "completions":
        prompts = body["prompt"] if isinstance(body["prompt"], list) else [body["prompt"]]
        ids = []
        for p in prompts:
            ids.extend(tok.encode(p, add_special_tokens=True).ids)
        return None, ids
    text = render_chat(config, content_format, body)
    return text, tok.encode(text, add_special_tokens=body.get("add_special_tokens", False)).ids


# --- requests ------------------------------------------------------------------------------

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name, e.g. \"Paris\""},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7, "default": 1},
        "threshold": {"type": "number", "default": 0.5}},
        "required": ["city"]}}}
SEARCH_TOOL = {"type": "function", "function": {
    "name": "search_docs", "description": "Search the documentation <internal> & public.",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}}

LONG_USER = ("Please review the following function and suggest improvements.\n\n"
             "def add(a, b):\n    return a + b\n\n" * 3)

CONVERSATION = [
    {"role": "system", "content": "You are a helpful assistant. Answer concisely."},
    {"role": "user", "content": "What is the capital of France?"},
    {"role": "assistant", "content": "The capital of France is Paris."},
    {"role": "user", "content": "And what is its population?  Give a rough number."},
    {"role": "assistant", "content": "About 2.1 million people live in Paris proper."},
    {"role": "user", "content": LONG_USER},
    {"role": "assistant", "content": "Add type hints:\n\ndef add(a: int, b: int) -> int:\n    return a + b"},
    {"role": "user", "content": "Thanks! Grüße 🙂 — one more question: 日本語?"},
]


# A request-level chat template (string content format; trims message content).
REQUEST_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n"
    "{{ m.content | trim }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)


def cases():
    out = [
        ("completion_single", "completions", {"prompt": "The quick brown fox jumps over the lazy dog."}),
        ("completion_list", "completions", {"prompt": ["Hello world", "  leading spaces and\nnewlines\n\n"]}),
        ("completion_unicode", "completions", {"prompt": "Grüße aus München! 日本語 🙂🚀 \u0007 tab\tend"}),
        ("completion_special_text", "completions",
         {"prompt": "<|start_header_id|>user<|end_header_id|> [INST] literal special tokens <s> [/INST]"}),
        ("chat_single_user", "chat", {"messages": [{"role": "user", "content": "Hello there!"}]}),
        ("chat_system_user", "chat", {"messages": CONVERSATION[:2]}),
        ("chat_no_generation_prompt", "chat",
         {"messages": CONVERSATION[:3], "add_generation_prompt": False}),
        ("chat_template_kwargs", "chat",
         {"messages": CONVERSATION[:2], "chat_template_kwargs": {"knowledge_cutoff": "December 2023"}}),
        ("chat_content_parts", "chat", {"messages": [
            {"role": "system", "content": [{"type": "text", "text": "  Be brief.  "}]},
            {"role": "user", "content": [
                {"type": "text", "text": "First part."},
                {"type": "text", "text": "Second part with ünïcödé."}]}]}),
        ("chat_tools", "chat", {"tools": [WEATHER_TOOL, SEARCH_TOOL], "messages": [
            {"role": "system", "content": "Use tools when useful."},
            {"role": "user", "content": "Weather in Paris for 3 days?"},
            {"role": "assistant", "content": None, "tool_calls": [{
                "id": "call0001", "type": "function",
                "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"days\": 3}"}}]},
            {"role": "tool", "tool_call_id": "call0001", "content": "{\"temp_c\": 21, \"sky\": \"sunny\"}"},
            {"role": "user", "content": "And in Berlin?"}]}),
        ("chat_starts_with_assistant", "chat", {"messages": [
            {"role": "assistant", "content": "I speak first."}, {"role": "user", "content": "Fine."}]}),
    ]
    prefill = CONVERSATION[:3] + [{"role": "assistant", "content": "Sure. The answer is "}]
    out += [
        # The final assistant message stays open (vLLM / transformers continue_final_message).
        ("chat_continue_final_message", "chat",
         {"messages": prefill, "add_generation_prompt": False, "continue_final_message": True}),
        ("chat_continue_final_parts", "chat", {"messages": CONVERSATION[:1] + [
            {"role": "user", "content": "Write a haiku."},
            {"role": "assistant", "content": [{"type": "text", "text": "Autumn wind  "},
                                              {"type": "text", "text": "over the "}]}],
            "add_generation_prompt": False, "continue_final_message": True}),
        # A request-level template replaces the model's.
        ("chat_request_template", "chat", {"messages": CONVERSATION[:4], "chat_template": REQUEST_TEMPLATE}),
        ("chat_request_template_continue", "chat",
         {"messages": prefill, "chat_template": REQUEST_TEMPLATE, "add_generation_prompt": False,
          "continue_final_message": True}),
    ]
    for n in range(2, len(CONVERSATION) + 1, 2):
        out.append((f"chat_multi_turn_{n}", "chat", {"messages": CONVERSATION[:n]}))
    return out


def main():
    ap = argparse.ArgumentParser()
    root = Path(__file__).resolve().parent.parent
    ap.add_argument("--corpus", default="/work/shared/reference")
    ap.add_argument("--out", default=str(root / "tests/fixtures/tokenizers"))
    args = ap.parse_args()
    corpus = read_corpus(args.corpus)
    out = Path(args.out)
    for family, builder in (("llama3", build_llama), ("mistral", build_mistral)):
        tok, config, content_format = builder(corpus)
        d = out / family
        d.mkdir(parents=True, exist_ok=True)
        tok.save(str(d / "tokenizer.json"))
        (d / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")
        results = []
        for name, api, body in cases():
            body = dict(model="fixture-model", **body)
            try:
                text, ids = expected_ids(tok, config, content_format, api, body)
                results.append({"name": name, "api": api, "body": body, "rendered": text, "ids": ids})
            except jinja2.exceptions.TemplateError as e:
                results.append({"name": name, "api": api, "body": body, "error": str(e)})
        (d / "cases.json").write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n")
        print(family, len(results), "cases,", tok.get_vocab_size(), "tokens")


if __name__ == "__main__":
    main()
