//! Chat templates: Hugging Face Jinja chat templates rendered with minijinja the way
//! transformers and vLLM render them.
//!
//! Owns: choosing the template (`chat_template.jinja`, or `tokenizer_config.json`'s
//! `chat_template` as a string or a list of named templates: `tool_use` when the request has
//! tools and that template exists, else `default`), the environment (`trim_blocks`,
//! `lstrip_blocks`, loop controls, Python string methods via minijinja-contrib's pycompat,
//! `raise_exception`, `strftime_now`, and a `tojson` that matches Python's `json.dumps` with
//! `ensure_ascii=False`, i.e. no HTML escaping and `", "`/`": "` separators), and vLLM's
//! message normalisation: the content format is detected from the template source ("openai"
//! when the template loops over a message's `content`, else "string"); string format joins
//! the text parts with `\n`, openai format turns every content into a list of
//! `{type: "text", text}` / `{type: "image"}` parts; assistant `tool_calls` have their
//! `function.arguments` JSON string parsed into an object; `name` and `tool_call_id` pass
//! through.
//!
//! A request-level `chat_template` replaces the model's (compiled per request). With
//! `continue_final_message`, the final message is left open as transformers does it: a tag
//! is appended to its (last text part's) content, the template rendered, and the text cut
//! at the tag (and right-trimmed when the template trimmed the space after it).
//!
//! Input: [`ChatPrompt`] and the model's special-token strings. Output: the rendered prompt
//! text. Known differences from Python Jinja: printing a bare boolean or `None` with
//! `{{ }}` (Python prints `True`/`None`), Python-only object methods beyond pycompat.

use std::collections::BTreeMap;

use minijinja::value::{Kwargs, Value, ValueKind};
use minijinja::{AutoEscape, Environment, ErrorKind};

use crate::request::openai::{ChatMessage, ChatPrompt, MessageContent};

/// Template names inside the environment.
const DEFAULT: &str = "default";
const TOOL_USE: &str = "tool_use";

/// How a template expects message content.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContentFormat {
    /// `content` is a string (text parts joined with `\n`).
    String,
    /// `content` is a list of typed parts.
    OpenAi,
}

/// Why a template could not be loaded or rendered.
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    /// The template source does not compile.
    #[error("chat template {name:?} does not compile")]
    Compile {
        /// Template name.
        name: String,
        /// Cause.
        #[source]
        source: minijinja::Error,
    },
    /// Rendering failed (includes `raise_exception` from the template).
    #[error("chat template rendering failed")]
    Render(#[source] minijinja::Error),
    /// A request value could not be turned into a template value.
    #[error("request field is not valid JSON for the template")]
    Value(#[source] serde_json::Error),
    /// The model has no chat template.
    #[error("the model has no chat template")]
    Missing,
    /// `continue_final_message`: the final message has no text, or the rendered text does
    /// not contain it (transformers raises the same).
    #[error("continue_final_message: the final message does not appear in the rendered chat")]
    ContinueFinalMessage,
}

/// Special-token strings a template can print (`bos_token`, ...).
#[derive(Clone, Debug, Default)]
pub struct SpecialTokens {
    /// Name (`bos_token`) -> content.
    pub by_name: BTreeMap<String, String>,
}

/// The compiled chat templates of one model.
#[derive(Debug)]
pub struct ChatTemplates {
    env: Environment<'static>,
    /// For request-level templates (untrusted): the same setup with a fuel limit.
    request_env: Environment<'static>,
    has_tool_use: bool,
    /// `None`: the model has no template (only request-level templates render).
    default_format: Option<ContentFormat>,
    tool_use_format: Option<ContentFormat>,
}

/// Template instructions a request-level template may execute (minijinja fuel): bounds the
/// CPU a hostile template can take from a pool worker.
const REQUEST_TEMPLATE_FUEL: u64 = 5_000_000;

impl ChatTemplates {
    /// Compiles `templates` (name -> source). A single unnamed template is passed as
    /// `[("default", src)]`.
    ///
    /// An empty list is a model without a template.
    ///
    /// Errors: [`TemplateError::Compile`] naming the template; [`TemplateError::Missing`] when
    /// templates are given but none is `default`.
    pub fn new(templates: Vec<(String, String)>) -> Result<Self, TemplateError> {
        let mut env = environment();
        let mut default_format = None;
        let mut tool_use_format = None;
        for (name, source) in templates {
            let format = detect_content_format(&source);
            if name == DEFAULT {
                default_format = Some(format);
            } else if name == TOOL_USE {
                tool_use_format = Some(format);
            }
            env.add_template_owned(name.clone(), source).map_err(|source| TemplateError::Compile { name, source })?;
        }
        if default_format.is_none() && env.templates().next().is_some() {
            return Err(TemplateError::Missing);
        }
        let mut request_env = environment();
        request_env.set_fuel(Some(REQUEST_TEMPLATE_FUEL));
        Ok(Self {
            env,
            request_env,
            has_tool_use: tool_use_format.is_some(),
            default_format,
            tool_use_format: tool_use_format.or(default_format),
        })
    }

    /// Renders `chat` (transformers' `apply_chat_template(tokenize=False)` semantics).
    ///
    /// Errors: [`TemplateError::Render`] (including `raise_exception`),
    /// [`TemplateError::Compile`] for a request-level template,
    /// [`TemplateError::Value`] for malformed `tools` / `tool_calls` / kwargs JSON,
    /// [`TemplateError::ContinueFinalMessage`].
    pub fn render(&self, chat: &ChatPrompt, special: &SpecialTokens) -> Result<String, TemplateError> {
        let options = &chat.template;
        let (named, format) = match (&options.chat_template, self.default_format) {
            (Some(source), _) => (None, detect_content_format(source)),
            (None, None) => return Err(TemplateError::Missing),
            (None, Some(default)) if chat.tools.is_some() && self.has_tool_use => {
                (Some(TOOL_USE), self.tool_use_format.unwrap_or(default))
            }
            (None, Some(default)) => (Some(DEFAULT), default),
        };
        let mut ctx: BTreeMap<String, Value> = BTreeMap::new();
        for (k, v) in &special.by_name {
            ctx.insert(k.clone(), Value::from(v.as_str()));
        }
        let last = chat.messages.len().saturating_sub(1);
        let mut final_text = None;
        let mut messages = Vec::with_capacity(chat.messages.len());
        for (i, m) in chat.messages.iter().enumerate() {
            let open = options.continue_final_message && i == last;
            let (value, text) = message_value(m, format, open)?;
            final_text = final_text.or(text);
            messages.push(value);
        }
        ctx.insert("messages".into(), Value::from(messages));
        let tools = match &chat.tools {
            Some(raw) => json_value(raw.get())?,
            None => Value::from(()),
        };
        ctx.insert("tools".into(), tools);
        ctx.insert("documents".into(), Value::from(()));
        ctx.insert("add_generation_prompt".into(), Value::from(options.add_generation_prompt));
        if let Some(kwargs) = &options.kwargs {
            let kwargs = json_value(kwargs.get())?;
            if let Ok(keys) = kwargs.try_iter() {
                for key in keys {
                    if let (Some(k), Ok(v)) = (key.as_str(), kwargs.get_item(&key)) {
                        ctx.insert(k.to_string(), v);
                    }
                }
            }
        }
        let rendered = match (named, &options.chat_template) {
            (Some(name), _) => self.env.get_template(name).and_then(|t| t.render(Value::from(ctx))),
            (None, Some(source)) => self.request_env.render_str(source, Value::from(ctx)),
            (None, None) => return Err(TemplateError::Missing),
        };
        let rendered = rendered.map_err(TemplateError::Render)?;
        match final_text {
            Some(text) if options.continue_final_message => cut_at_final_message(rendered, &text),
            _ => Ok(rendered),
        }
    }
}

/// Appended to the final message's text with `continue_final_message` (transformers' tag).
const CONTINUE_TAG: &str = "CONTINUE_FINAL_MESSAGE_TAG ";

/// transformers' cut for `continue_final_message`: the text before the tag, right-trimmed
/// when the template did not keep the tag's trailing space.
fn cut_at_final_message(mut rendered: String, final_text: &str) -> Result<String, TemplateError> {
    let tag = CONTINUE_TAG.trim_end();
    if !rendered.contains(py_strip(final_text)) {
        return Err(TemplateError::ContinueFinalMessage);
    }
    let at = rendered.rfind(tag).ok_or(TemplateError::ContinueFinalMessage)?;
    let keeps_space = rendered[at..].starts_with(CONTINUE_TAG);
    rendered.truncate(at);
    if !keeps_space {
        let kept = rendered.trim_end_matches(is_py_space).len();
        rendered.truncate(kept);
    }
    Ok(rendered)
}

/// Python's `str.isspace` for one character (Unicode White_Space plus the four
/// information separators U+001C..U+001F).
fn is_py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Python's `str.strip()`.
fn py_strip(s: &str) -> &str {
    s.trim_matches(is_py_space)
}

/// The environment transformers uses, in minijinja terms.
fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    let syntax = minijinja::syntax::SyntaxConfig::builder()
        .trim_blocks(true)
        .lstrip_blocks(true)
        .keep_trailing_newline(false)
        .build();
    // The builder only fails on custom delimiters; the defaults are used here.
    if let Ok(syntax) = syntax {
        env.set_syntax(syntax);
    }
    env.set_auto_escape_callback(|_| AutoEscape::None);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    minijinja_contrib::add_to_environment(&mut env);
    env.add_function("raise_exception", |message: String| -> Result<Value, minijinja::Error> {
        Err(minijinja::Error::new(ErrorKind::InvalidOperation, message))
    });
    env.add_function("strftime_now", |format: String| -> String { super::clock::strftime_now(&format) });
    env.add_filter("tojson", tojson);
    env
}

/// vLLM's `_detect_content_format`, approximated on the source: a `for` loop over a
/// message's `content` means the template wants typed parts.
pub fn detect_content_format(source: &str) -> ContentFormat {
    let compact: String = source.chars().filter(|c| !c.is_whitespace()).collect();
    let loops_over_content = compact.match_indices("in").any(|(i, _)| {
        let rest = &compact[i + 2..];
        let ident_len = rest.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(rest.len());
        let after = &rest[ident_len..];
        ident_len > 0
            && compact[..i].rfind("for").is_some_and(|f| {
                let head = &compact[..f];
                (head.ends_with("{%") || head.ends_with("{%-")) && !compact[f..i].contains("%}")
            })
            && (after.starts_with(".content") || after.starts_with("['content']") || after.starts_with("[\"content\"]"))
            && !after.trim_start_matches(".content").starts_with('.')
    });
    if loops_over_content { ContentFormat::OpenAi } else { ContentFormat::String }
}

/// A map value keeping insertion order (`Value::from_iter` would build a list of pairs).
fn map_value(entries: impl IntoIterator<Item = (Value, Value)>) -> Value {
    Value::from(entries.into_iter().collect::<indexmap::IndexMap<Value, Value>>())
}

fn json_value(text: &str) -> Result<Value, TemplateError> {
    serde_json::from_str::<Value>(text).map_err(TemplateError::Value)
}

/// One message normalised as vLLM's chat_utils does before rendering. With `open` (the final
/// message under `continue_final_message`), [`CONTINUE_TAG`] is appended to its text (the
/// last text part in the openai format) and that text, without the tag, is returned too.
fn message_value(m: &ChatMessage, format: ContentFormat, open: bool) -> Result<(Value, Option<String>), TemplateError> {
    let mut map: Vec<(Value, Value)> = vec![(Value::from("role"), Value::from(m.role.as_str()))];
    let mut final_text = None;
    let mut open_text = |t: &str| -> String {
        final_text = Some(t.to_string());
        format!("{t}{CONTINUE_TAG}")
    };
    let content = match (format, &m.content) {
        (ContentFormat::String, MessageContent::Text(t)) if open => Value::from(open_text(t)),
        (ContentFormat::String, MessageContent::Text(t)) => Value::from(t.as_str()),
        (ContentFormat::String, MessageContent::None) if open => Value::from(open_text("")),
        (ContentFormat::String, MessageContent::None) => Value::from(""),
        (ContentFormat::String, MessageContent::Parts(parts)) => {
            let texts: Vec<&str> =
                parts.iter().filter(|p| is_text_kind(&p.kind)).filter_map(|p| p.text.as_deref()).collect();
            let joined = texts.join("\n");
            Value::from(if open { open_text(&joined) } else { joined })
        }
        (ContentFormat::OpenAi, MessageContent::Text(t)) if open => Value::from(vec![text_part(&open_text(t))]),
        (ContentFormat::OpenAi, MessageContent::Text(t)) => Value::from(vec![text_part(t)]),
        (ContentFormat::OpenAi, MessageContent::None) => Value::from(Vec::<Value>::new()),
        (ContentFormat::OpenAi, MessageContent::Parts(parts)) => {
            let last_text = parts.iter().rposition(|p| is_text_kind(&p.kind) && p.text.is_some());
            Value::from(
                parts
                    .iter()
                    .enumerate()
                    .filter_map(|(i, p)| match (is_text_kind(&p.kind), p.text.as_deref()) {
                        (true, Some(t)) if open && Some(i) == last_text => Some(text_part(&open_text(t))),
                        (true, Some(t)) => Some(text_part(t)),
                        (true, None) => None,
                        (false, _) => media_kind(&p.kind).map(|k| map_value([(Value::from("type"), Value::from(k))])),
                    })
                    .collect::<Vec<_>>(),
            )
        }
    };
    if open && final_text.is_none() {
        return Err(TemplateError::ContinueFinalMessage);
    }
    map.push((Value::from("content"), content));
    let extras = m.extras.as_deref();
    if let Some(name) = extras.and_then(|e| e.name.as_ref()) {
        map.push((Value::from("name"), Value::from(name.as_str())));
    }
    if m.role == "assistant"
        && let Some(calls) = extras.and_then(|e| e.tool_calls.as_ref())
    {
        map.push((Value::from("tool_calls"), tool_calls_value(calls.get())?));
    }
    if m.role == "tool"
        && let Some(id) = extras.and_then(|e| e.tool_call_id.as_ref())
    {
        map.push((Value::from("tool_call_id"), Value::from(id.as_str())));
    }
    Ok((map_value(map), final_text))
}

fn is_text_kind(kind: &str) -> bool {
    matches!(kind, "text" | "input_text")
}

/// The part type vLLM's openai content format uses for a media part.
fn media_kind(kind: &str) -> Option<&'static str> {
    match kind {
        "image_url" | "input_image" | "image_pil" | "image_embeds" => Some("image"),
        "input_audio" | "audio_url" => Some("audio"),
        "video_url" => Some("video"),
        _ => None,
    }
}

fn text_part(text: &str) -> Value {
    map_value([(Value::from("type"), Value::from("text")), (Value::from("text"), Value::from(text))])
}

/// `tool_calls` with every `function.arguments` JSON string parsed into a value (key
/// order kept).
fn tool_calls_value(raw: &str) -> Result<Value, TemplateError> {
    let calls = json_value(raw)?;
    if calls.kind() != ValueKind::Seq {
        return Ok(calls);
    }
    let mut out = Vec::new();
    for call in calls.try_iter().map_err(TemplateError::Render)? {
        let args = call.get_attr("function").and_then(|f| f.get_attr("arguments")).ok();
        match args.as_ref().and_then(Value::as_str) {
            Some(text) => out.push(replace_arguments(&call, json_value(text)?)),
            None => out.push(call),
        }
    }
    Ok(Value::from(out))
}

/// A copy of `call` (a map) whose `function.arguments` is `args`, keys in order.
fn replace_arguments(call: &Value, args: Value) -> Value {
    let rebuild = |map: &Value, f: &dyn Fn(&Value, Value) -> Value| -> Value {
        let keys: Vec<Value> = map.try_iter().map(Iterator::collect).unwrap_or_default();
        map_value(keys.into_iter().map(|k| {
            let v = map.get_item(&k).unwrap_or_default();
            let v = f(&k, v);
            (k, v)
        }))
    };
    rebuild(call, &|k, v| {
        if k.as_str() == Some("function") {
            rebuild(&v, &|fk, fv| if fk.as_str() == Some("arguments") { args.clone() } else { fv })
        } else {
            v
        }
    })
}

/// transformers' `tojson`: `json.dumps(x, ensure_ascii=False, indent=indent,
/// separators=separators, sort_keys=sort_keys)`.
fn tojson(value: &Value, kwargs: Kwargs) -> Result<String, minijinja::Error> {
    let indent: Option<Value> = kwargs.get("indent")?;
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    let ensure_ascii: Option<bool> = kwargs.get("ensure_ascii")?;
    let separators: Option<Value> = kwargs.get("separators")?;
    kwargs.assert_all_used()?;
    let indent = match indent {
        Some(v) if v.is_none() || v.is_undefined() => None,
        Some(v) => match v.as_str() {
            Some(s) => Some(s.to_string()),
            None => Some(" ".repeat(usize::try_from(v).unwrap_or(0))),
        },
        None => None,
    };
    let (item_sep, key_sep) =
        match separators.as_ref().and_then(|s| Some((s.get_item_by_index(0).ok()?, s.get_item_by_index(1).ok()?))) {
            Some((a, b)) => (a.as_str().unwrap_or(",").to_string(), b.as_str().unwrap_or(":").to_string()),
            None if indent.is_some() => (",".to_string(), ": ".to_string()),
            None => (", ".to_string(), ": ".to_string()),
        };
    let mut w = PyJson {
        out: String::new(),
        indent,
        item_sep,
        key_sep,
        sort_keys: sort_keys.unwrap_or(false),
        ensure_ascii: ensure_ascii.unwrap_or(false),
    };
    w.value(value, 0)?;
    Ok(w.out)
}

struct PyJson {
    out: String,
    indent: Option<String>,
    item_sep: String,
    key_sep: String,
    sort_keys: bool,
    ensure_ascii: bool,
}

impl PyJson {
    fn newline(&mut self, depth: usize) {
        if let Some(ind) = &self.indent {
            self.out.push('\n');
            for _ in 0..depth {
                self.out.push_str(ind);
            }
        }
    }

    fn value(&mut self, v: &Value, depth: usize) -> Result<(), minijinja::Error> {
        match v.kind() {
            ValueKind::Undefined | ValueKind::None => self.out.push_str("null"),
            ValueKind::Bool => self.out.push_str(if v.is_true() { "true" } else { "false" }),
            ValueKind::Number if v.is_integer() => self.out.push_str(&v.to_string()),
            ValueKind::Number => self.out.push_str(&python_float(f64::try_from(v.clone()).unwrap_or(f64::NAN))),
            ValueKind::String | ValueKind::Bytes => self.string(v.as_str().unwrap_or_default()),
            ValueKind::Seq | ValueKind::Iterable => {
                let items: Vec<Value> = v.try_iter()?.collect();
                if items.is_empty() {
                    self.out.push_str("[]");
                    return Ok(());
                }
                self.out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        let sep = self.item_sep.clone();
                        self.out.push_str(&sep);
                    }
                    self.newline(depth + 1);
                    self.value(item, depth + 1)?;
                }
                self.newline(depth);
                self.out.push(']');
            }
            ValueKind::Map => {
                let mut keys: Vec<Value> = v.try_iter()?.collect();
                if keys.is_empty() {
                    self.out.push_str("{}");
                    return Ok(());
                }
                if self.sort_keys {
                    keys.sort();
                }
                self.out.push('{');
                for (i, k) in keys.iter().enumerate() {
                    if i > 0 {
                        let sep = self.item_sep.clone();
                        self.out.push_str(&sep);
                    }
                    self.newline(depth + 1);
                    match k.as_str() {
                        Some(s) => self.string(s),
                        None => self.string(&k.to_string()),
                    }
                    let sep = self.key_sep.clone();
                    self.out.push_str(&sep);
                    self.value(&v.get_item(k)?, depth + 1)?;
                }
                self.newline(depth);
                self.out.push('}');
            }
            _ => self.string(&v.to_string()),
        }
        Ok(())
    }

    fn string(&mut self, s: &str) {
        self.out.push('"');
        for c in s.chars() {
            match c {
                '"' => self.out.push_str("\\\""),
                '\\' => self.out.push_str("\\\\"),
                '\n' => self.out.push_str("\\n"),
                '\r' => self.out.push_str("\\r"),
                '\t' => self.out.push_str("\\t"),
                '\u{8}' => self.out.push_str("\\b"),
                '\u{c}' => self.out.push_str("\\f"),
                c if (c as u32) < 0x20 => self.out.push_str(&format!("\\u{:04x}", c as u32)),
                c if self.ensure_ascii && !c.is_ascii() => {
                    let mut buf = [0u16; 2];
                    for unit in c.encode_utf16(&mut buf) {
                        self.out.push_str(&format!("\\u{unit:04x}"));
                    }
                }
                c => self.out.push(c),
            }
        }
        self.out.push('"');
    }
}

/// Python's `repr(float)`: shortest round-trip digits, exponent form below 1e-4 or from 1e16.
pub fn python_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity".into() } else { "-Infinity".into() };
    }
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if (-4..16).contains(&exp) {
        let plain = format!("{f}");
        if plain.contains('.') { plain } else { format!("{plain}.0") }
    } else {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.abs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_float_forms() {
        assert_eq!(python_float(0.5), "0.5");
        assert_eq!(python_float(1.0), "1.0");
        assert_eq!(python_float(1e-5), "1e-05");
        assert_eq!(python_float(1e16), "1e+16");
        assert_eq!(python_float(123456789012345.0), "123456789012345.0");
        assert_eq!(python_float(-2.5e-7), "-2.5e-07");
    }

    #[test]
    fn tojson_matches_python_dumps() {
        let env = environment();
        let v: Value = serde_json::from_str(r#"{"z":1,"a":[1.0,"<&>",null,true],"e":{}}"#).expect("json");
        let render = |src: &str| env.render_str(src, minijinja::context! { v => v.clone() }).expect("renders");
        assert_eq!(render("{{ v | tojson }}"), r#"{"z": 1, "a": [1.0, "<&>", null, true], "e": {}}"#);
        assert_eq!(
            render("{{ v | tojson(indent=1) }}"),
            "{\n \"z\": 1,\n \"a\": [\n  1.0,\n  \"<&>\",\n  null,\n  true\n ],\n \"e\": {}\n}"
        );
        assert_eq!(render("{{ v | tojson(sort_keys=true) }}"), r#"{"a": [1.0, "<&>", null, true], "e": {}, "z": 1}"#);
    }

    #[test]
    fn content_format_detection() {
        assert_eq!(detect_content_format("{% for m in messages %}{{ m.content }}{% endfor %}"), ContentFormat::String);
        assert_eq!(
            detect_content_format("{% for m in messages %}{% for p in m.content %}{{p.text}}{% endfor %}{% endfor %}"),
            ContentFormat::OpenAi
        );
        assert_eq!(detect_content_format("{%- for part in message['content'] -%}"), ContentFormat::OpenAi);
        assert_eq!(detect_content_format("{% for x in message.content.split() %}"), ContentFormat::String);
    }

    fn chat(body: &str) -> ChatPrompt {
        match crate::request::openai::parse_body(crate::request::openai::ApiKind::ChatCompletions, body.as_bytes()) {
            Ok(crate::request::openai::ParsedBody { prompt: crate::request::openai::Prompt::Chat(c), .. }) => {
                (*c).clone()
            }
            other => panic!("not chat: {other:?}"),
        }
    }

    #[test]
    fn request_templates_are_fuel_limited_and_work_without_a_model_template() {
        let none = ChatTemplates::new(Vec::new()).expect("no template is fine");
        let special = SpecialTokens::default();
        let plain = chat(r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#);
        assert!(matches!(none.render(&plain, &special), Err(TemplateError::Missing)));
        let own = chat(
            r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"chat_template":"[{{ messages[0].content }}]"}"#,
        );
        assert_eq!(none.render(&own, &special).expect("renders"), "[hi]");
        let hostile = chat(
            r#"{"model":"m","messages":[{"role":"user","content":"hi"}],
            "chat_template":"{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"}"#,
        );
        assert!(matches!(none.render(&hostile, &special), Err(TemplateError::Render(_))), "out of fuel");
    }

    #[test]
    fn continue_final_message_cuts_at_the_open_message() {
        let t = ChatTemplates::new(vec![(
            "default".into(),
            "{% for m in messages %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>{% endfor %}".into(),
        )])
        .expect("compiles");
        let body = r#"{"model":"m","add_generation_prompt":false,"continue_final_message":true,
            "messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"Sure, "}]}"#;
        let rendered = t.render(&chat(body), &SpecialTokens::default()).expect("renders");
        assert_eq!(rendered, "<user>hi</user><assistant>Sure, ");
        let no_text = r#"{"model":"m","continue_final_message":true,"add_generation_prompt":false,
            "messages":[{"role":"assistant","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}"#;
        let openai = ChatTemplates::new(vec![(
            "default".into(),
            "{% for m in messages %}{% for p in m.content %}{{ p.text }}{% endfor %}{% endfor %}".into(),
        )])
        .expect("compiles");
        assert!(matches!(
            openai.render(&chat(no_text), &SpecialTokens::default()),
            Err(TemplateError::ContinueFinalMessage)
        ));
    }

    #[test]
    fn raise_exception_is_a_render_error() {
        let t = ChatTemplates::new(vec![("default".into(), "{{ raise_exception('no') }}".into())]).expect("compiles");
        let chat = ChatPrompt { messages: Vec::new(), tools: None, template: Default::default() };
        assert!(matches!(t.render(&chat, &SpecialTokens::default()), Err(TemplateError::Render(_))));
    }
}
