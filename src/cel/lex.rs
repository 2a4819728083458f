//! CEL tokens: text -> `Vec<Token>` with byte offsets for error messages.

use super::parse::CompileError;

/// One token.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Tok {
    Int(i64),
    Uint(u64),
    Double(f64),
    Str(String),
    Ident(String),
    True,
    False,
    Null,
    /// Punctuation and operators, as written (`&&`, `<=`, `(`, ...).
    Op(&'static str),
}

/// A token and the byte offset it starts at.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Token {
    pub tok: Tok,
    pub at: usize,
}

const OPS: [&str; 22] = [
    "&&", "||", "==", "!=", "<=", ">=", "<", ">", "+", "-", "*", "/", "%", "!", "?", ":", "(", ")", ".", ",", "[", "]",
];

/// Words CEL reserves; they cannot be identifiers.
const RESERVED: [&str; 17] = [
    "as",
    "break",
    "const",
    "continue",
    "else",
    "for",
    "function",
    "if",
    "import",
    "let",
    "loop",
    "package",
    "namespace",
    "return",
    "var",
    "void",
    "while",
];

pub(crate) fn lex(src: &str) -> Result<Vec<Token>, CompileError> {
    let bytes = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let at = i;
        if c.is_ascii_digit() || (c == b'.' && bytes.get(i + 1).is_some_and(u8::is_ascii_digit)) {
            let (tok, end) = number(src, i)?;
            out.push(Token { tok, at });
            i = end;
        } else if c == b'"' || c == b'\'' {
            let (s, end) = string(src, i)?;
            out.push(Token { tok: Tok::Str(s), at });
            i = end;
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let end = src[i..].find(|ch: char| !(ch.is_ascii_alphanumeric() || ch == '_')).map_or(src.len(), |n| i + n);
            let word = &src[i..end];
            let tok = match word {
                "true" => Tok::True,
                "false" => Tok::False,
                "null" => Tok::Null,
                "in" => return Err(CompileError::unsupported(at, "the `in` operator")),
                w if RESERVED.contains(&w) => return Err(CompileError::syntax(at, format!("reserved word `{w}`"))),
                w => Tok::Ident(w.to_string()),
            };
            out.push(Token { tok, at });
            i = end;
        } else if let Some(op) = OPS.iter().find(|op| src[i..].starts_with(**op)) {
            out.push(Token { tok: Tok::Op(op), at });
            i += op.len();
        } else {
            let ch = src[i..].chars().next().unwrap_or('?');
            return Err(CompileError::syntax(at, format!("unexpected character {ch:?}")));
        }
    }
    Ok(out)
}

fn number(src: &str, start: usize) -> Result<(Tok, usize), CompileError> {
    let bytes = src.as_bytes();
    let bad = |what: &str| CompileError::syntax(start, format!("invalid number literal: {what}"));
    if src[start..].starts_with("0x") || src[start..].starts_with("0X") {
        let digits_end = src[start + 2..].find(|c: char| !c.is_ascii_hexdigit()).map_or(src.len(), |n| start + 2 + n);
        let digits = &src[start + 2..digits_end];
        if bytes.get(digits_end).is_some_and(|b| *b == b'u' || *b == b'U') {
            let v = u64::from_str_radix(digits, 16).map_err(|_| bad(digits))?;
            return Ok((Tok::Uint(v), digits_end + 1));
        }
        let v = i64::from_str_radix(digits, 16).map_err(|_| bad(digits))?;
        return Ok((Tok::Int(v), digits_end));
    }
    let mut end = start;
    while end < bytes.len() && bytes[end].is_ascii_digit() {
        end += 1;
    }
    let mut is_double = false;
    if end < bytes.len() && bytes[end] == b'.' && bytes.get(end + 1).is_some_and(u8::is_ascii_digit) {
        is_double = true;
        end += 1;
        while end < bytes.len() && bytes[end].is_ascii_digit() {
            end += 1;
        }
    }
    if end < bytes.len() && (bytes[end] == b'e' || bytes[end] == b'E') {
        let mut e = end + 1;
        if e < bytes.len() && (bytes[e] == b'+' || bytes[e] == b'-') {
            e += 1;
        }
        if e < bytes.len() && bytes[e].is_ascii_digit() {
            is_double = true;
            end = e;
            while end < bytes.len() && bytes[end].is_ascii_digit() {
                end += 1;
            }
        }
    }
    let text = &src[start..end];
    if is_double {
        let v: f64 = text.parse().map_err(|_| bad(text))?;
        return Ok((Tok::Double(v), end));
    }
    if bytes.get(end).is_some_and(|b| *b == b'u' || *b == b'U') {
        let v: u64 = text.parse().map_err(|_| bad(text))?;
        return Ok((Tok::Uint(v), end + 1));
    }
    // `-9223372036854775808` is unary minus on a literal that does not fit; CEL rejects it too.
    let v: i64 = text.parse().map_err(|_| bad(text))?;
    Ok((Tok::Int(v), end))
}

fn string(src: &str, start: usize) -> Result<(String, usize), CompileError> {
    let quote = src.as_bytes()[start] as char;
    let mut out = String::new();
    let mut chars = src[start + 1..].char_indices();
    while let Some((off, c)) = chars.next() {
        match c {
            c if c == quote => return Ok((out, start + 1 + off + 1)),
            '\n' => break,
            '\\' => match chars.next().map(|(_, e)| e) {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some('r') => out.push('\r'),
                Some(e @ ('\\' | '"' | '\'' | '`' | '?')) => out.push(e),
                Some(e) => return Err(CompileError::unsupported(start, format!("string escape `\\{e}`"))),
                None => break,
            },
            c => out.push(c),
        }
    }
    Err(CompileError::syntax(start, "unterminated string literal"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(s: &str) -> Vec<Tok> {
        lex(s).unwrap().into_iter().map(|t| t.tok).collect()
    }

    #[test]
    fn numbers_strings_and_operators() {
        assert_eq!(
            toks("1 2u 0x1F 1.5 2e3 .5"),
            [Tok::Int(1), Tok::Uint(2), Tok::Int(31), Tok::Double(1.5), Tok::Double(2000.0), Tok::Double(0.5)]
        );
        assert_eq!(toks(r#"'a\'b' "c\n""#), [Tok::Str("a'b".into()), Tok::Str("c\n".into())]);
        assert_eq!(
            toks("a.b>=1&&!c"),
            [
                Tok::Ident("a".into()),
                Tok::Op("."),
                Tok::Ident("b".into()),
                Tok::Op(">="),
                Tok::Int(1),
                Tok::Op("&&"),
                Tok::Op("!"),
                Tok::Ident("c".into())
            ]
        );
    }

    #[test]
    fn rejects_bad_input() {
        for bad in ["'open", "1 # 2", "99999999999999999999", "x in y", "let", "'\\q'"] {
            assert!(lex(bad).is_err(), "{bad}");
        }
    }
}
