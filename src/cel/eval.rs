//! Evaluation of a checked [`Expr`] against variables. Never panics: every fault is an
//! [`EvalError`]. Arithmetic is checked (overflow is an error, as in CEL).

use std::cmp::Ordering;
use std::collections::BTreeMap;

use super::Value;
use super::parse::{BinOp, Conv, Expr};

/// A runtime fault.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EvalError {
    /// A variable without a value.
    #[error("no value for variable `{0}`")]
    UnboundVariable(String),
    /// A missing map key (`usage.no_such_field` without `has()`).
    #[error("no such key: {0}")]
    NoSuchKey(String),
    /// Operand types that no overload accepts (e.g. `int + double`).
    #[error("no such overload: {op} applied to ({lhs}{rhs})")]
    NoOverload {
        /// Operator or function.
        op: &'static str,
        /// Type of the first operand.
        lhs: &'static str,
        /// `, type` of the second operand, or empty.
        rhs: String,
    },
    /// Integer overflow, or a conversion out of range.
    #[error("{0} out of range")]
    Overflow(&'static str),
    /// Integer division or modulus by zero.
    #[error("division by zero")]
    DivisionByZero,
    /// A string that does not parse as the requested number.
    #[error("cannot convert {0:?} to a number")]
    BadNumber(String),
}

fn overload1(op: &'static str, v: &Value) -> EvalError {
    EvalError::NoOverload { op, lhs: v.type_name(), rhs: String::new() }
}

fn overload2(op: &'static str, a: &Value, b: &Value) -> EvalError {
    EvalError::NoOverload { op, lhs: a.type_name(), rhs: format!(", {}", b.type_name()) }
}

/// Evaluates `e`.
pub fn eval(e: &Expr, vars: &BTreeMap<&str, Value>) -> Result<Value, EvalError> {
    match e {
        Expr::Lit(v) => Ok(v.clone()),
        Expr::Var(name) => vars.get(name.as_str()).cloned().ok_or_else(|| EvalError::UnboundVariable(name.clone())),
        Expr::Select(operand, field) => match eval(operand, vars)? {
            Value::Map(mut m) => m.remove(field).ok_or_else(|| EvalError::NoSuchKey(field.clone())),
            other => Err(overload1("field selection", &other)),
        },
        Expr::Has(operand, field) => match eval(operand, vars)? {
            Value::Map(m) => Ok(Value::Bool(m.contains_key(field))),
            other => Err(overload1("has", &other)),
        },
        Expr::Not(x) => match eval(x, vars)? {
            Value::Bool(b) => Ok(Value::Bool(!b)),
            other => Err(overload1("!", &other)),
        },
        Expr::Neg(x) => match eval(x, vars)? {
            Value::Int(i) => i.checked_neg().map(Value::Int).ok_or(EvalError::Overflow("int")),
            Value::Double(d) => Ok(Value::Double(-d)),
            other => Err(overload1("-", &other)),
        },
        Expr::Cond(c, a, b) => match eval(c, vars)? {
            Value::Bool(true) => eval(a, vars),
            Value::Bool(false) => eval(b, vars),
            other => Err(overload1("?:", &other)),
        },
        Expr::Conv(c, x) => convert(*c, eval(x, vars)?),
        Expr::Bin(BinOp::And, a, b) => logic(false, eval(a, vars), eval(b, vars), "&&"),
        Expr::Bin(BinOp::Or, a, b) => logic(true, eval(a, vars), eval(b, vars), "||"),
        Expr::Bin(op, a, b) => binary(*op, eval(a, vars)?, eval(b, vars)?),
    }
}

/// `&&` (`decisive` = false) and `||` (`decisive` = true): a decisive operand wins even if the
/// other side is an error or not a bool, as in CEL.
fn logic(
    decisive: bool,
    a: Result<Value, EvalError>,
    b: Result<Value, EvalError>,
    op: &'static str,
) -> Result<Value, EvalError> {
    if matches!(a, Ok(Value::Bool(v)) if v == decisive) || matches!(b, Ok(Value::Bool(v)) if v == decisive) {
        return Ok(Value::Bool(decisive));
    }
    match (a?, b?) {
        (Value::Bool(_), Value::Bool(_)) => Ok(Value::Bool(!decisive)),
        (x, y) => Err(overload2(op, &x, &y)),
    }
}

fn binary(op: BinOp, a: Value, b: Value) -> Result<Value, EvalError> {
    use Value::*;
    let name = op_name(op);
    match op {
        BinOp::Eq => Ok(Bool(equal(&a, &b))),
        BinOp::Ne => Ok(Bool(!equal(&a, &b))),
        BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => {
            let ord = compare(&a, &b).ok_or_else(|| overload2(name, &a, &b))?;
            Ok(Bool(match op {
                BinOp::Lt => ord == Ordering::Less,
                BinOp::Le => ord != Ordering::Greater,
                BinOp::Gt => ord == Ordering::Greater,
                _ => ord != Ordering::Less,
            }))
        }
        _ => match (a, b) {
            (Int(x), Int(y)) => int_arith(op, x, y).map(Int),
            (Uint(x), Uint(y)) => uint_arith(op, x, y).map(Uint),
            (Double(x), Double(y)) => match op {
                BinOp::Add => Ok(Double(x + y)),
                BinOp::Sub => Ok(Double(x - y)),
                BinOp::Mul => Ok(Double(x * y)),
                BinOp::Div => Ok(Double(x / y)),
                _ => Err(overload2(name, &Double(x), &Double(y))),
            },
            (String(x), String(y)) if op == BinOp::Add => Ok(String(x + &y)),
            (x, y) => Err(overload2(name, &x, &y)),
        },
    }
}

fn op_name(op: BinOp) -> &'static str {
    match op {
        BinOp::Add => "+",
        BinOp::Sub => "-",
        BinOp::Mul => "*",
        BinOp::Div => "/",
        BinOp::Rem => "%",
        BinOp::Eq => "==",
        BinOp::Ne => "!=",
        BinOp::Lt => "<",
        BinOp::Le => "<=",
        BinOp::Gt => ">",
        BinOp::Ge => ">=",
        BinOp::And => "&&",
        BinOp::Or => "||",
    }
}

/// `checked_{add, sub, mul, div, rem}` of one integer type.
type CheckedOps<T> = [fn(T, T) -> Option<T>; 5];

/// Checked integer arithmetic: division by zero and overflow are errors.
fn checked_arith<T: Copy + Default + PartialEq>(
    op: BinOp,
    x: T,
    y: T,
    ops: CheckedOps<T>,
    kind: &'static str,
) -> Result<T, EvalError> {
    if matches!(op, BinOp::Div | BinOp::Rem) && y == T::default() {
        return Err(EvalError::DivisionByZero);
    }
    let [add, sub, mul, div, rem] = ops;
    let f = match op {
        BinOp::Add => add,
        BinOp::Sub => sub,
        BinOp::Mul => mul,
        BinOp::Div => div,
        _ => rem,
    };
    f(x, y).ok_or(EvalError::Overflow(kind))
}

fn int_arith(op: BinOp, x: i64, y: i64) -> Result<i64, EvalError> {
    let ops = [i64::checked_add, i64::checked_sub, i64::checked_mul, i64::checked_div, i64::checked_rem];
    checked_arith(op, x, y, ops, "int")
}

fn uint_arith(op: BinOp, x: u64, y: u64) -> Result<u64, EvalError> {
    let ops = [u64::checked_add, u64::checked_sub, u64::checked_mul, u64::checked_div, u64::checked_rem];
    checked_arith(op, x, y, ops, "uint")
}

/// Numeric comparison across int, uint and double (exact for large integers).
fn num_cmp(a: &Value, b: &Value) -> Option<Ordering> {
    use Value::*;
    match (a, b) {
        (Int(x), Int(y)) => Some(x.cmp(y)),
        (Uint(x), Uint(y)) => Some(x.cmp(y)),
        (Double(x), Double(y)) => x.partial_cmp(y),
        (Int(x), Uint(y)) => Some(if *x < 0 { Ordering::Less } else { (*x as u64).cmp(y) }),
        (Uint(_), Int(_)) => num_cmp(b, a).map(Ordering::reverse),
        (Int(x), Double(y)) => (*x as f64).partial_cmp(y),
        (Uint(x), Double(y)) => (*x as f64).partial_cmp(y),
        (Double(_), Int(_) | Uint(_)) => num_cmp(b, a).map(Ordering::reverse),
        _ => None,
    }
}

fn compare(a: &Value, b: &Value) -> Option<Ordering> {
    match (a, b) {
        (Value::String(x), Value::String(y)) => Some(x.cmp(y)),
        (Value::Bool(x), Value::Bool(y)) => Some(x.cmp(y)),
        _ => num_cmp(a, b),
    }
}

/// CEL heterogeneous equality: numbers compare by value across types; other type pairs are
/// unequal.
fn equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Map(x), Value::Map(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| equal(v, w)))
        }
        _ => match num_cmp(a, b) {
            Some(o) => o == Ordering::Equal,
            None => a == b,
        },
    }
}

fn convert(c: Conv, v: Value) -> Result<Value, EvalError> {
    use Value::*;
    match (c, v) {
        (Conv::Dyn, v) => Ok(v),
        (Conv::Int, Int(i)) => Ok(Int(i)),
        (Conv::Int, Uint(u)) => i64::try_from(u).map(Int).map_err(|_| EvalError::Overflow("int")),
        // Truncation toward zero; the range check keeps NaN and infinities out.
        (Conv::Int, Double(d)) if d.is_finite() && d > -9.223_372_036_854_776e18 && d < 9.223_372_036_854_776e18 => {
            Ok(Int(d as i64))
        }
        (Conv::Int, Double(_)) => Err(EvalError::Overflow("int")),
        (Conv::Int, String(s)) => s.trim().parse().map(Int).map_err(|_| EvalError::BadNumber(s)),
        (Conv::Uint, Uint(u)) => Ok(Uint(u)),
        (Conv::Uint, Int(i)) => u64::try_from(i).map(Uint).map_err(|_| EvalError::Overflow("uint")),
        (Conv::Uint, Double(d)) if d.is_finite() && d > -1.0 && d < 1.844_674_407_370_955_2e19 => Ok(Uint(d as u64)),
        (Conv::Uint, Double(_)) => Err(EvalError::Overflow("uint")),
        (Conv::Uint, String(s)) => s.trim().parse().map(Uint).map_err(|_| EvalError::BadNumber(s)),
        (Conv::Double, Double(d)) => Ok(Double(d)),
        (Conv::Double, Int(i)) => Ok(Double(i as f64)),
        (Conv::Double, Uint(u)) => Ok(Double(u as f64)),
        (Conv::Double, String(s)) => s.trim().parse().map(Double).map_err(|_| EvalError::BadNumber(s)),
        (Conv::Int, v) => Err(overload1("int", &v)),
        (Conv::Uint, v) => Err(overload1("uint", &v)),
        (Conv::Double, v) => Err(overload1("double", &v)),
    }
}

#[cfg(test)]
mod tests {
    use super::super::Program;
    use super::*;

    fn usage(fields: &[(&str, f64)]) -> BTreeMap<&'static str, Value> {
        let m = fields.iter().map(|(k, v)| (k.to_string(), Value::Double(*v))).collect();
        BTreeMap::from([("usage", Value::Map(m))])
    }

    fn run(src: &str, vars: &BTreeMap<&str, Value>) -> Result<Value, EvalError> {
        Program::compile(src, &["usage"]).unwrap().eval(vars)
    }

    #[test]
    fn usage_expressions() {
        let v = usage(&[("prompt_tokens", 10.0), ("completion_tokens", 25.0)]);
        assert_eq!(run("usage.prompt_tokens + usage.completion_tokens", &v), Ok(Value::Double(35.0)));
        assert_eq!(run("usage.completion_tokens > 0", &v), Ok(Value::Bool(true)));
        assert_eq!(run("usage.prompt_tokens == 10", &v), Ok(Value::Bool(true)));
        assert_eq!(run("int(usage.prompt_tokens) * 3", &v), Ok(Value::Int(30)));
        assert_eq!(run("usage.prompt_tokens * 2.5", &v), Ok(Value::Double(25.0)));
        let guarded = "(has(usage.cached) ? usage.cached : 0) + (has(usage.prompt_tokens) ? usage.prompt_tokens : 0)";
        // `0 + 10.0` mixes int and double at run time: an error, as in CEL.
        assert!(matches!(run(guarded, &v), Err(EvalError::NoOverload { .. })));
        let guarded = "(has(usage.cached) ? usage.cached : 0.0) + usage.prompt_tokens";
        assert_eq!(run(guarded, &v), Ok(Value::Double(10.0)));
    }

    #[test]
    fn runtime_errors() {
        let v = usage(&[("prompt_tokens", 1.0)]);
        assert_eq!(run("usage.nope", &v), Err(EvalError::NoSuchKey("nope".into())));
        assert!(matches!(run("usage.prompt_tokens + 1", &v), Err(EvalError::NoOverload { .. })));
        assert_eq!(run("1 / 0", &v), Err(EvalError::DivisionByZero));
        assert_eq!(run("9223372036854775807 + 1", &v), Err(EvalError::Overflow("int")));
        assert_eq!(run("int(usage.prompt_tokens / 0.0)", &v), Err(EvalError::Overflow("int")));
        assert!(matches!(run("!usage.prompt_tokens", &v), Err(EvalError::NoOverload { .. })));
        assert!(matches!(run("usage.prompt_tokens ? 1 : 2", &v), Err(EvalError::NoOverload { .. })));
        assert_eq!(run("usage", &BTreeMap::new()), Err(EvalError::UnboundVariable("usage".into())));
    }

    #[test]
    fn logic_absorbs_errors_like_cel() {
        let v = usage(&[]);
        assert_eq!(run("false && usage.missing > 1", &v), Ok(Value::Bool(false)));
        assert_eq!(run("usage.missing > 1 && false", &v), Ok(Value::Bool(false)));
        assert_eq!(run("usage.missing > 1 || true", &v), Ok(Value::Bool(true)));
        assert!(run("usage.missing > 1 || false", &v).is_err());
        assert_eq!(run("true && !false", &v), Ok(Value::Bool(true)));
    }

    #[test]
    fn equality_ordering_and_conversions() {
        let v = usage(&[]);
        for (src, want) in [
            ("1 == 1.0", true),
            ("1u == 1", true),
            ("-1 < 1u", true),
            ("'a' < 'b'", true),
            ("'a' == 1", false),
            ("null == null", true),
            ("2.5 >= 2", true),
            ("int('42') == 42", true),
            ("uint(3.9) == 3u", true),
            ("double(7) / 2.0 == 3.5", true),
            ("-7 / 2 == -3 && -7 % 2 == -1", true),
            ("(true ? 'x' : 'y') == 'x'", true),
        ] {
            assert_eq!(run(src, &v), Ok(Value::Bool(want)), "{src}");
        }
        assert_eq!(run("uint(-1)", &v), Err(EvalError::Overflow("uint")));
        assert_eq!(run("int('x')", &v), Err(EvalError::BadNumber("x".into())));
        assert_eq!(run("0u - 1u", &v), Err(EvalError::Overflow("uint")));
    }
}
