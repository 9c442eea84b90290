//! Shared decoding for the event parsers: size limit, JSON field access that names the field
//! in its errors (and never echoes a value), strict URL decoding, base64, key checks.

use base64::alphabet;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, STANDARD};
use base64::engine::DecodePaddingMode;
use base64::Engine;
use serde_json::Value;

use super::{ParseError, MAX_BODY_BYTES};

/// Refuses anything longer than [`MAX_BODY_BYTES`] before spending time on it.
pub(crate) fn check_size(what: &str, len: usize) -> Result<(), ParseError> {
    if len > MAX_BODY_BYTES {
        return Err(ParseError::new(format!(
            "{what}: {len} bytes, more than the {MAX_BODY_BYTES} accepted"
        )));
    }
    Ok(())
}

/// Parses JSON text. serde_json's own limit (128 levels) stops deep nesting with an error,
/// and its syntax errors name a position, not the text.
pub(crate) fn parse_json(what: &str, text: &str) -> Result<Value, ParseError> {
    if text.trim().is_empty() {
        return Err(ParseError::new(format!("{what}: empty")));
    }
    serde_json::from_str(text).map_err(|e| ParseError::new(format!("{what}: not JSON ({e})")))
}

/// Same, from bytes (which must be UTF-8).
pub(crate) fn parse_json_bytes(what: &str, bytes: &[u8]) -> Result<Value, ParseError> {
    let text =
        std::str::from_utf8(bytes).map_err(|_| ParseError::new(format!("{what}: not UTF-8")))?;
    parse_json(what, text)
}

/// JSON type name for messages ("expected an object, found an array").
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// `path.key`, or just `key` at the top level (path "").
pub(crate) fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// How a path reads in a message: the top level (path "") is "body".
pub(crate) fn display(path: &str) -> &str {
    if path.is_empty() {
        "body"
    } else {
        path
    }
}

/// `v` as an object, or an error naming `path`.
pub(crate) fn object<'a>(
    v: &'a Value,
    path: &str,
) -> Result<&'a serde_json::Map<String, Value>, ParseError> {
    v.as_object().ok_or_else(|| {
        ParseError::new(format!(
            "{}: expected an object, found {}",
            display(path),
            kind(v)
        ))
    })
}

/// The object member `key` of `v` (which must be an object).
pub(crate) fn child<'a>(v: &'a Value, key: &str, path: &str) -> Result<&'a Value, ParseError> {
    match object(v, path)?.get(key) {
        Some(Value::Null) | None => Err(ParseError::new(format!("{}: missing", join(path, key)))),
        Some(c) => Ok(c),
    }
}

/// A required string member.
pub(crate) fn req_str<'a>(v: &'a Value, key: &str, path: &str) -> Result<&'a str, ParseError> {
    let c = child(v, key, path)?;
    c.as_str().ok_or_else(|| {
        ParseError::new(format!(
            "{}: expected a string, found {}",
            join(path, key),
            kind(c)
        ))
    })
}

/// An optional string member: absent, null or "" is `None`; another type is an error.
pub(crate) fn opt_str<'a>(
    v: &'a Value,
    key: &str,
    path: &str,
) -> Result<Option<&'a str>, ParseError> {
    match object(v, path)?.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(ParseError::new(format!(
            "{}: expected a string, found {}",
            join(path, key),
            kind(other)
        ))),
    }
}

/// An optional string member that is only informative (a time, an id): a value of another
/// type is dropped rather than failing the message (moto sends EventBridge `time` as a number).
pub(crate) fn loose_str(v: &Value, key: &str) -> Option<String> {
    match v.get(key) {
        Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
        _ => None,
    }
}

/// An optional non-negative integer member, given as a JSON number or as decimal digits in a
/// string (GCS sends `"size": "1024"`); absent or null is `None`.
pub(crate) fn opt_u64(v: &Value, key: &str, path: &str) -> Result<Option<u64>, ParseError> {
    match object(v, path)?.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(other) => as_u64(other).map(Some).ok_or_else(|| {
            ParseError::new(format!(
                "{}: expected a non-negative integer, found {}",
                join(path, key),
                kind(other)
            ))
        }),
    }
}

fn as_u64(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => parse_u64(s),
        _ => None,
    }
}

/// Decimal digits only (no sign, no spaces), fitting in a u64.
pub(crate) fn parse_u64(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Strict URL decoding: `%XX` becomes the byte XX, and with `plus_is_space` (HTML form
/// encoding, as S3 event keys use) `+` becomes a space. A `%` not followed by two hex digits,
/// or bytes that are not UTF-8 once decoded, are errors naming `what`.
pub(crate) fn url_decode(what: &str, s: &str, plus_is_space: bool) -> Result<String, ParseError> {
    let encoded = s.contains('%') || (plus_is_space && s.contains('+'));
    if !encoded {
        return Ok(s.to_string());
    }
    let mut out = Vec::with_capacity(s.len());
    let mut bytes = s.bytes();
    while let Some(b) = bytes.next() {
        match b {
            b'%' => {
                let hi = bytes.next().and_then(hex_value);
                let lo = bytes.next().and_then(hex_value);
                match (hi, lo) {
                    (Some(hi), Some(lo)) => out.push((hi << 4) | lo),
                    _ => {
                        return Err(ParseError::new(format!(
                            "{what}: bad percent-encoding ('%' not followed by two hex digits)"
                        )))
                    }
                }
            }
            b'+' if plus_is_space => out.push(b' '),
            other => out.push(other),
        }
    }
    String::from_utf8(out)
        .map_err(|_| ParseError::new(format!("{what}: not UTF-8 once percent-decoded")))
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// An object key must be usable downstream: not empty, no NUL.
pub(crate) fn check_key(what: &str, key: String) -> Result<String, ParseError> {
    if key.is_empty() {
        return Err(ParseError::new(format!("{what}: empty key")));
    }
    if key.contains('\0') {
        return Err(ParseError::new(format!("{what}: key contains NUL")));
    }
    Ok(key)
}

/// A bucket or container name: not empty, no NUL, no `/`.
pub(crate) fn check_bucket(what: &str, name: &str) -> Result<String, ParseError> {
    if name.is_empty() {
        return Err(ParseError::new(format!("{what}: empty bucket name")));
    }
    if name.contains('\0') || name.contains('/') {
        return Err(ParseError::new(format!(
            "{what}: bucket name contains NUL or '/'"
        )));
    }
    Ok(name.to_string())
}

/// Padding optional, and bits past the last whole byte ignored (as Azure and Google are lax
/// about both in what they hand over).
const LENIENT: GeneralPurposeConfig = GeneralPurposeConfig::new()
    .with_decode_padding_mode(DecodePaddingMode::Indifferent)
    .with_decode_allow_trailing_bits(true);
const STANDARD_LENIENT: GeneralPurpose = GeneralPurpose::new(&alphabet::STANDARD, LENIENT);
const URL_SAFE_LENIENT: GeneralPurpose = GeneralPurpose::new(&alphabet::URL_SAFE, LENIENT);

/// Decodes base64 in the standard or the URL-safe alphabet (one of them: the text's `-` or
/// `_` picks the URL-safe one), padding optional, ASCII whitespace skipped. `None` for
/// anything else.
pub(crate) fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let compact: std::borrow::Cow<'_, str> = if s.bytes().any(|b| b.is_ascii_whitespace()) {
        s.chars()
            .filter(|c| !c.is_ascii_whitespace())
            .collect::<String>()
            .into()
    } else {
        s.into()
    };
    let engine = if compact.contains(['-', '_']) {
        &URL_SAFE_LENIENT
    } else {
        &STANDARD_LENIENT
    };
    engine.decode(compact.as_bytes()).ok()
}

/// Encodes base64 (standard alphabet, padded): the inverse of [`base64_decode`] (request
/// signatures; tests that build queue messages and push bodies).
pub(crate) fn base64_encode(bytes: &[u8]) -> String {
    STANDARD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_decode_table() {
        // (input, plus_is_space, expected)
        let ok: &[(&str, bool, &str)] = &[
            ("plain/key.txt", true, "plain/key.txt"),
            ("a+b", true, "a b"),
            ("a+b", false, "a+b"),
            ("a%2Bb", true, "a+b"),
            ("a%2bb", true, "a+b"),
            ("a%2Fb%2Fc", true, "a/b/c"),
            ("red+flower.jpg", true, "red flower.jpg"),
            ("caf%C3%A9+%E2%9C%93.txt", true, "café ✓.txt"),
            ("%E6%97%A5%E6%9C%AC/%F0%9F%92%8E", true, "日本/💎"),
            ("already/ünïcode", true, "already/ünïcode"),
            ("100%25", true, "100%"),
            ("", true, ""),
        ];
        for (input, plus, want) in ok {
            assert_eq!(
                url_decode("k", input, *plus).as_deref(),
                Ok(*want),
                "{input}"
            );
        }
        let bad: &[&str] = &[
            "%", "a%", "a%2", "%ZZ", "%G0", "%C3%28", "%FF", "%C3", "a%e9b",
        ];
        for input in bad {
            let e = url_decode("Records[0].s3.object.key", input, true).unwrap_err();
            assert!(
                e.reason.starts_with("Records[0].s3.object.key: "),
                "{input}: {e}"
            );
        }
    }

    #[test]
    fn base64_table() {
        let ok: &[(&str, &[u8])] = &[
            ("", b""),
            ("Zg==", b"f"),
            ("Zg", b"f"),
            ("Zm8=", b"fo"),
            ("Zm9v", b"foo"),
            ("Zm9vYg==", b"foob"),
            ("Zm9v\nYmFy", b"foobar"),
            ("+/8=", &[0xfb, 0xff]),
            ("-_8", &[0xfb, 0xff]),
        ];
        for (input, want) in ok {
            assert_eq!(base64_decode(input).as_deref(), Some(*want), "{input}");
        }
        for bad in [
            "Z",
            "Zg=a",
            "Zg===",
            "Z===",
            "Zm9v!",
            "é",
            "Zm9v=Zm9v",
            "+/-_",
        ] {
            assert_eq!(base64_decode(bad), None, "{bad}");
        }
        // encoding is standard and padded, and round-trips
        let cases: &[(&[u8], &str)] = &[
            (b"", ""),
            (b"f", "Zg=="),
            (b"fo", "Zm8="),
            (b"foobar", "Zm9vYmFy"),
            (&[0xfb, 0xff], "+/8="),
        ];
        for (bytes, text) in cases {
            assert_eq!(base64_encode(bytes), *text);
            assert_eq!(base64_decode(text).as_deref(), Some(*bytes));
        }
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(base64_decode(&base64_encode(&all)), Some(all));
    }

    #[test]
    fn numbers_and_fields() {
        let v: Value = serde_json::json!({"n": 5, "s": "12", "neg": -1, "f": 1.5,
            "bad": "1e3", "big": "99999999999999999999", "null": null, "str": "x", "e": ""});
        assert_eq!(opt_u64(&v, "n", "o"), Ok(Some(5)));
        assert_eq!(opt_u64(&v, "s", "o"), Ok(Some(12)));
        assert_eq!(opt_u64(&v, "null", "o"), Ok(None));
        assert_eq!(opt_u64(&v, "absent", "o"), Ok(None));
        for k in ["neg", "f", "bad", "big", "str"] {
            let e = opt_u64(&v, k, "o").unwrap_err();
            assert!(e.reason.starts_with(&format!("o.{k}: expected")), "{e}");
        }
        assert_eq!(opt_str(&v, "e", "o"), Ok(None));
        assert!(opt_str(&v, "n", "o").is_err());
        assert_eq!(
            req_str(&v, "absent", "o").unwrap_err().reason,
            "o.absent: missing"
        );
        assert_eq!(
            req_str(&v, "n", "").unwrap_err().reason,
            "n: expected a string, found a number"
        );
        assert!(object(&Value::Null, "body").is_err());
    }
}
