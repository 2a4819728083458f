//! CEL text -> [`Expr`] (recursive descent with CEL's precedence: `?:` < `||` < `&&` <
//! relations < `+ -` < `* / %` < unary < member access), and the static check that rejects
//! unknown variables and operand types that can never match an overload.

use super::lex::{Tok, Token, lex};

/// Deepest nesting accepted (keeps recursion bounded on hostile input).
const MAX_DEPTH: usize = 64;

/// Why an expression was rejected at compile time.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{kind} at offset {at}: {message}")]
pub struct CompileError {
    /// Byte offset in the source.
    pub at: usize,
    /// `syntax error`, `unsupported` or `type error`.
    pub kind: &'static str,
    /// What is wrong.
    pub message: String,
}

impl CompileError {
    pub(crate) fn syntax(at: usize, message: impl Into<String>) -> Self {
        Self { at, kind: "syntax error", message: message.into() }
    }
    pub(crate) fn unsupported(at: usize, what: impl Into<String>) -> Self {
        Self { at, kind: "unsupported", message: format!("{} is not supported by this CEL subset", what.into()) }
    }
    fn types(at: usize, message: impl Into<String>) -> Self {
        Self { at, kind: "type error", message: message.into() }
    }
}

/// Binary operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/`
    Div,
    /// `%`
    Rem,
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `&&`
    And,
    /// `||`
    Or,
}

/// Conversion functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Conv {
    /// `int(x)`
    Int,
    /// `uint(x)`
    Uint,
    /// `double(x)`
    Double,
    /// `dyn(x)`
    Dyn,
}

/// A parsed expression; `at` fields are byte offsets for messages.
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    /// A literal.
    Lit(super::Value),
    /// A variable.
    Var(String),
    /// `operand.field`.
    Select(Box<Expr>, String),
    /// `has(operand.field)`.
    Has(Box<Expr>, String),
    /// `!x`.
    Not(Box<Expr>),
    /// `-x`.
    Neg(Box<Expr>),
    /// `a op b`.
    Bin(BinOp, Box<Expr>, Box<Expr>),
    /// `c ? a : b`.
    Cond(Box<Expr>, Box<Expr>, Box<Expr>),
    /// A conversion call.
    Conv(Conv, Box<Expr>),
}

/// Parses a whole expression.
pub fn parse(src: &str) -> Result<Expr, CompileError> {
    let tokens = lex(src)?;
    if tokens.is_empty() {
        return Err(CompileError::syntax(0, "empty expression"));
    }
    let mut p = Parser { tokens, pos: 0, end: src.len(), depth: 0 };
    let e = p.expr()?;
    match p.tokens.get(p.pos) {
        None => Ok(e),
        Some(t) => Err(CompileError::syntax(t.at, format!("unexpected {}", describe(&t.tok)))),
    }
}

fn describe(t: &Tok) -> String {
    match t {
        Tok::Op(o) => format!("`{o}`"),
        Tok::Ident(i) => format!("identifier `{i}`"),
        _ => "literal".into(),
    }
}

struct Parser {
    tokens: Vec<Token>,
    pos: usize,
    end: usize,
    depth: usize,
}

impl Parser {
    fn at(&self) -> usize {
        self.tokens.get(self.pos).map_or(self.end, |t| t.at)
    }

    fn peek_op(&self) -> Option<&'static str> {
        match self.tokens.get(self.pos) {
            Some(Token { tok: Tok::Op(o), .. }) => Some(o),
            _ => None,
        }
    }

    fn eat(&mut self, op: &str) -> bool {
        if self.peek_op() == Some(op) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, op: &str) -> Result<(), CompileError> {
        if self.eat(op) {
            return Ok(());
        }
        let found = self.tokens.get(self.pos).map_or("end of expression".to_string(), |t| describe(&t.tok));
        Err(CompileError::syntax(self.at(), format!("expected `{op}`, found {found}")))
    }

    fn nest(&mut self) -> Result<(), CompileError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(CompileError::syntax(self.at(), format!("expression nested deeper than {MAX_DEPTH}")));
        }
        Ok(())
    }

    fn expr(&mut self) -> Result<Expr, CompileError> {
        self.nest()?;
        let cond = self.or()?;
        let out = if self.eat("?") {
            let a = self.or()?;
            self.expect(":")?;
            let b = self.expr()?;
            Expr::Cond(Box::new(cond), Box::new(a), Box::new(b))
        } else {
            cond
        };
        self.depth -= 1;
        Ok(out)
    }

    fn binary_level(
        &mut self,
        ops: &[(&str, BinOp)],
        next: fn(&mut Self) -> Result<Expr, CompileError>,
    ) -> Result<Expr, CompileError> {
        let mut lhs = next(self)?;
        'outer: loop {
            for (text, op) in ops {
                if self.eat(text) {
                    let rhs = next(self)?;
                    lhs = Expr::Bin(*op, Box::new(lhs), Box::new(rhs));
                    continue 'outer;
                }
            }
            return Ok(lhs);
        }
    }

    fn or(&mut self) -> Result<Expr, CompileError> {
        self.binary_level(&[("||", BinOp::Or)], Self::and)
    }

    fn and(&mut self) -> Result<Expr, CompileError> {
        self.binary_level(&[("&&", BinOp::And)], Self::relation)
    }

    fn relation(&mut self) -> Result<Expr, CompileError> {
        let ops = [
            ("==", BinOp::Eq),
            ("!=", BinOp::Ne),
            ("<=", BinOp::Le),
            (">=", BinOp::Ge),
            ("<", BinOp::Lt),
            (">", BinOp::Gt),
        ];
        self.binary_level(&ops, Self::addition)
    }

    fn addition(&mut self) -> Result<Expr, CompileError> {
        self.binary_level(&[("+", BinOp::Add), ("-", BinOp::Sub)], Self::multiplication)
    }

    fn multiplication(&mut self) -> Result<Expr, CompileError> {
        self.binary_level(&[("*", BinOp::Mul), ("/", BinOp::Div), ("%", BinOp::Rem)], Self::unary)
    }

    fn unary(&mut self) -> Result<Expr, CompileError> {
        self.nest()?;
        let out = if self.eat("!") {
            Expr::Not(Box::new(self.unary()?))
        } else if self.eat("-") {
            Expr::Neg(Box::new(self.unary()?))
        } else {
            self.member()?
        };
        self.depth -= 1;
        Ok(out)
    }

    fn member(&mut self) -> Result<Expr, CompileError> {
        let mut e = self.primary()?;
        loop {
            if self.eat(".") {
                let at = self.at();
                let field = match self.tokens.get(self.pos) {
                    Some(Token { tok: Tok::Ident(f), .. }) => f.clone(),
                    _ => return Err(CompileError::syntax(at, "expected a field name after `.`")),
                };
                self.pos += 1;
                if self.peek_op() == Some("(") {
                    return Err(CompileError::unsupported(at, format!("method call `.{field}()`")));
                }
                e = Expr::Select(Box::new(e), field);
            } else if self.peek_op() == Some("[") {
                return Err(CompileError::unsupported(self.at(), "indexing with `[]`"));
            } else {
                return Ok(e);
            }
        }
    }

    fn primary(&mut self) -> Result<Expr, CompileError> {
        let at = self.at();
        let Some(token) = self.tokens.get(self.pos).cloned() else {
            return Err(CompileError::syntax(at, "unexpected end of expression"));
        };
        self.pos += 1;
        use super::Value as V;
        Ok(match token.tok {
            Tok::Int(i) => Expr::Lit(V::Int(i)),
            Tok::Uint(u) => Expr::Lit(V::Uint(u)),
            Tok::Double(d) => Expr::Lit(V::Double(d)),
            Tok::Str(s) => Expr::Lit(V::String(s)),
            Tok::True => Expr::Lit(V::Bool(true)),
            Tok::False => Expr::Lit(V::Bool(false)),
            Tok::Null => Expr::Lit(V::Null),
            Tok::Op("(") => {
                let e = self.expr()?;
                self.expect(")")?;
                e
            }
            Tok::Op("[") => return Err(CompileError::unsupported(at, "list literals")),
            Tok::Op("{") => return Err(CompileError::unsupported(at, "map literals")),
            Tok::Op(o) => return Err(CompileError::syntax(at, format!("unexpected `{o}`"))),
            Tok::Ident(name) if self.peek_op() == Some("(") => {
                self.pos += 1;
                let call = self.call(&name, at)?;
                self.expect(")")?;
                call
            }
            Tok::Ident(name) => Expr::Var(name),
        })
    }

    fn call(&mut self, name: &str, at: usize) -> Result<Expr, CompileError> {
        let conv = match name {
            "has" => {
                let arg = self.expr()?;
                return match arg {
                    Expr::Select(operand, field) => Ok(Expr::Has(operand, field)),
                    _ => {
                        Err(CompileError::syntax(at, "has() takes a field selection such as has(usage.prompt_tokens)"))
                    }
                };
            }
            "int" => Conv::Int,
            "uint" => Conv::Uint,
            "double" => Conv::Double,
            "dyn" => Conv::Dyn,
            other => return Err(CompileError::unsupported(at, format!("function `{other}()`"))),
        };
        let arg = self.expr()?;
        if self.peek_op() == Some(",") {
            return Err(CompileError::syntax(self.at(), format!("{name}() takes one argument")));
        }
        Ok(Expr::Conv(conv, Box::new(arg)))
    }
}

/// Static type of an expression; `Dyn` when only known at run time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ty {
    Dyn,
    Null,
    Bool,
    Int,
    Uint,
    Double,
    String,
}

fn is_num(t: Ty) -> bool {
    matches!(t, Ty::Int | Ty::Uint | Ty::Double)
}

/// Rejects unknown variables and operand types that can never match (cel-go's checker does
/// the same with `usage` declared as a dynamic struct).
pub fn check(expr: &Expr, variables: &[&str]) -> Result<(), CompileError> {
    ty(expr, variables).map(|_| ())
}

fn ty(e: &Expr, vars: &[&str]) -> Result<Ty, CompileError> {
    let err = |m: String| Err(CompileError::types(0, m));
    Ok(match e {
        Expr::Lit(v) => match v {
            super::Value::Null => Ty::Null,
            super::Value::Bool(_) => Ty::Bool,
            super::Value::Int(_) => Ty::Int,
            super::Value::Uint(_) => Ty::Uint,
            super::Value::Double(_) => Ty::Double,
            super::Value::String(_) => Ty::String,
            super::Value::Map(_) => Ty::Dyn,
        },
        Expr::Var(name) if vars.contains(&name.as_str()) => Ty::Dyn,
        Expr::Var(name) => return err(format!("undeclared reference `{name}` (known: {})", vars.join(", "))),
        Expr::Select(operand, field) | Expr::Has(operand, field) => {
            let t = ty(operand, vars)?;
            if t != Ty::Dyn {
                return err(format!("cannot select field `{field}` of a {t:?} value"));
            }
            if matches!(e, Expr::Has(..)) { Ty::Bool } else { Ty::Dyn }
        }
        Expr::Not(x) => match ty(x, vars)? {
            Ty::Bool | Ty::Dyn => Ty::Bool,
            t => return err(format!("`!` needs a bool, found {t:?}")),
        },
        Expr::Neg(x) => match ty(x, vars)? {
            t @ (Ty::Int | Ty::Double | Ty::Dyn) => t,
            t => return err(format!("unary `-` needs an int or double, found {t:?}")),
        },
        Expr::Conv(c, x) => {
            let t = ty(x, vars)?;
            if matches!(t, Ty::Null | Ty::Bool) && *c != Conv::Dyn {
                return err(format!("no conversion {c:?}({t:?})"));
            }
            match c {
                Conv::Int => Ty::Int,
                Conv::Uint => Ty::Uint,
                Conv::Double => Ty::Double,
                Conv::Dyn => Ty::Dyn,
            }
        }
        Expr::Cond(c, a, b) => {
            let tc = ty(c, vars)?;
            if !matches!(tc, Ty::Bool | Ty::Dyn) {
                return err(format!("the condition of `?:` must be a bool, found {tc:?}"));
            }
            let (ta, tb) = (ty(a, vars)?, ty(b, vars)?);
            if ta == tb { ta } else { Ty::Dyn }
        }
        Expr::Bin(op, a, b) => {
            let (ta, tb) = (ty(a, vars)?, ty(b, vars)?);
            let known = ta != Ty::Dyn && tb != Ty::Dyn;
            match op {
                BinOp::And | BinOp::Or => {
                    for t in [ta, tb] {
                        if !matches!(t, Ty::Bool | Ty::Dyn) {
                            return err(format!("{op:?} needs bool operands, found {t:?}"));
                        }
                    }
                    Ty::Bool
                }
                BinOp::Eq | BinOp::Ne => Ty::Bool,
                BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => {
                    if known && !(ta == tb && matches!(ta, Ty::String | Ty::Bool) || is_num(ta) && is_num(tb)) {
                        return err(format!("no ordering between {ta:?} and {tb:?}"));
                    }
                    Ty::Bool
                }
                BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div | BinOp::Rem => {
                    let string_concat = *op == BinOp::Add && ta == Ty::String;
                    if known && (ta != tb || !(is_num(ta) || string_concat)) {
                        return err(format!("no overload of {op:?} for ({ta:?}, {tb:?})"));
                    }
                    if *op == BinOp::Rem && (ta == Ty::Double || tb == Ty::Double) {
                        return err("`%` is not defined for double".into());
                    }
                    if ta == Ty::Dyn { tb } else { ta }
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn precedence_and_shapes() {
        let e = parse("a + b * 2 > 3 && !c || d ? 1 : 2").unwrap();
        let Expr::Cond(cond, _, _) = e else { panic!("not a conditional") };
        let Expr::Bin(BinOp::Or, lhs, _) = *cond else { panic!("|| is loosest") };
        let Expr::Bin(BinOp::And, rel, _) = *lhs else { panic!("&& under ||") };
        let Expr::Bin(BinOp::Gt, sum, _) = *rel else { panic!("> under &&") };
        assert!(matches!(*sum, Expr::Bin(BinOp::Add, _, ref r) if matches!(**r, Expr::Bin(BinOp::Mul, _, _))));
        assert_eq!(parse("has(usage.x)").unwrap(), Expr::Has(Box::new(Expr::Var("usage".into())), "x".into()));
        assert!(matches!(parse("-(1)").unwrap(), Expr::Neg(_)));
    }

    #[test]
    fn syntax_errors_and_unsupported_forms() {
        for bad in [
            "",
            "usage.prompt_tokens + -",
            "usage.prompt_tokens > ",
            "(1",
            "1 2",
            "has(usage)",
            "size(usage)",
            "usage.x.startsWith('a')",
            "usage['x']",
            "[1, 2]",
            "int(1, 2)",
            "a ? b",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} should not parse");
        }
        let deep = format!("{}1{}", "(".repeat(200), ")".repeat(200));
        assert!(parse(&deep).is_err(), "nesting is bounded");
    }

    #[test]
    fn static_checks() {
        let ok = |s: &str| check(&parse(s).unwrap(), &["usage"]);
        assert!(ok("usage.prompt_tokens + usage.completion_tokens").is_ok());
        assert!(ok("has(usage.prompt_tokens) ? usage.prompt_tokens : 0").is_ok());
        assert!(ok("usage.completion_tokens > 0").is_ok());
        assert!(ok("'a' + 'b' == 'ab'").is_ok());
        for bad in ["1 + 1.0", "!3", "1 && true", "other.x", "1.x", "'a' < 1", "2.0 % 1.0", "-'a'", "1 ? 2 : 3"] {
            assert!(ok(bad).is_err(), "{bad:?} should fail the check");
        }
    }
}
