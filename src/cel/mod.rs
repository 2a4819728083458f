//! A small evaluator for the subset of CEL (Common Expression Language) that
//! `request-attribute-reporter` expressions use: `int`/`uint`/`double`/`bool`/`string`/`null`
//! literals, variables and field selection (`usage.prompt_tokens`), arithmetic
//! (`+ - * / %`), comparison (`== != < <= > >=`), `&&`, `||`, `!`, unary `-`, the ternary
//! `c ? a : b`, the `has(x.f)` macro and the conversions `int()`, `uint()`, `double()`,
//! `dyn()`.
//!
//! [`Program::compile`] parses and type-checks once (at config load): unknown variables, other
//! functions, method calls, list/map literals, indexing and statically impossible operand
//! types (`1 + 1.0`, `!3`) are errors there. [`Program::eval`] runs against a map of variables
//! and never panics: runtime faults (missing field, mixed `int`/`double` arithmetic on dynamic
//! values, overflow, division by zero) are [`EvalError`]s.
//!
//! Semantics follow the CEL specification as implemented by cel-go: no implicit numeric
//! conversion in arithmetic, cross-type numeric equality and ordering (`1 == 1.0`), errors
//! absorbed by `&&`/`||` when the other side decides (`false && error` is `false`).
//!
//! Does not: support lists, maps, macros other than `has`, timestamps, regexes or string
//! functions. The parser is in [`parse`], the evaluator in [`eval`].

pub mod eval;
mod lex;
pub mod parse;

use std::collections::BTreeMap;
use std::fmt;

pub use eval::EvalError;
pub use parse::CompileError;

/// A CEL value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// `null`.
    Null,
    /// `bool`.
    Bool(bool),
    /// `int` (64-bit signed).
    Int(i64),
    /// `uint` (64-bit unsigned).
    Uint(u64),
    /// `double`.
    Double(f64),
    /// `string`.
    String(String),
    /// A map with string keys (a `google.protobuf.Struct`).
    Map(BTreeMap<String, Value>),
}

impl Value {
    /// The CEL type name, for error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Null => "null_type",
            Value::Bool(_) => "bool",
            Value::Int(_) => "int",
            Value::Uint(_) => "uint",
            Value::Double(_) => "double",
            Value::String(_) => "string",
            Value::Map(_) => "map",
        }
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Null => f.write_str("null"),
            Value::Bool(b) => write!(f, "{b}"),
            Value::Int(i) => write!(f, "{i}"),
            Value::Uint(u) => write!(f, "{u}u"),
            Value::Double(d) => write!(f, "{d:?}"),
            Value::String(s) => write!(f, "{s:?}"),
            Value::Map(m) => write!(f, "map({} entries)", m.len()),
        }
    }
}

/// A compiled expression: parsed and type-checked once, evaluated many times (`Send + Sync`).
#[derive(Clone, Debug)]
pub struct Program {
    expr: parse::Expr,
    source: String,
}

impl Program {
    /// Parses and checks `source`; `variables` are the names expressions may reference (each
    /// of dynamic type).
    pub fn compile(source: &str, variables: &[&str]) -> Result<Self, CompileError> {
        let expr = parse::parse(source)?;
        parse::check(&expr, variables)?;
        Ok(Self { expr, source: source.to_string() })
    }

    /// Evaluates against `vars` (name -> value).
    pub fn eval(&self, vars: &BTreeMap<&str, Value>) -> Result<Value, EvalError> {
        eval::eval(&self.expr, vars)
    }

    /// The expression as written.
    pub fn source(&self) -> &str {
        &self.source
    }
}
