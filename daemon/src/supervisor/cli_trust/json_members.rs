//! Adding and removing one member of a JSON object in place, as text: every other byte
//! of the file stays as the CLI (or the user) wrote it. A parser would lose the order
//! of the keys (serde_json sorts them) and the file's own layout.
//!
//! Only plain JSON (no comments): a file this cannot read is left alone.

/// One member of an object: `start` is its key's opening quote, `end` just past its
/// value.
#[derive(Debug)]
pub struct Member {
    pub key: String,
    pub start: usize,
    pub value: usize,
    pub end: usize,
}

/// An object: the offsets of its braces and its members in order.
#[derive(Debug)]
pub struct Object {
    pub open: usize,
    pub close: usize,
    pub members: Vec<Member>,
}

impl Object {
    pub fn member(&self, key: &str) -> Option<&Member> {
        self.members.iter().find(|m| m.key == key)
    }
}

/// The document's top-level object.
pub fn top(text: &str) -> Result<Object, String> {
    let at = skip_ws(text.as_bytes(), 0);
    let object = object_at(text, at)?;
    if skip_ws(text.as_bytes(), object.close + 1) != text.len() {
        return Err("text after the top-level object".into());
    }
    Ok(object)
}

/// The object whose `{` is at `at`.
pub fn object_at(text: &str, at: usize) -> Result<Object, String> {
    let b = text.as_bytes();
    if b.get(at) != Some(&b'{') {
        return Err(format!("no object at byte {at}"));
    }
    let mut members = Vec::new();
    let mut i = skip_ws(b, at + 1);
    if b.get(i) == Some(&b'}') {
        return Ok(Object {
            open: at,
            close: i,
            members,
        });
    }
    loop {
        let start = i;
        let key_end = string_end(b, i)?;
        let key: String = serde_json::from_str(&text[start..key_end])
            .map_err(|e| format!("a key at byte {start}: {e}"))?;
        i = skip_ws(b, key_end);
        if b.get(i) != Some(&b':') {
            return Err(format!("no `:` at byte {i}"));
        }
        let value = skip_ws(b, i + 1);
        let end = value_end(b, value)?;
        members.push(Member {
            key,
            start,
            value,
            end,
        });
        i = skip_ws(b, end);
        match b.get(i) {
            Some(b',') => i = skip_ws(b, i + 1),
            Some(b'}') => {
                return Ok(Object {
                    open: at,
                    close: i,
                    members,
                })
            }
            _ => return Err(format!("no `,` or `}}` at byte {i}")),
        }
    }
}

/// `text` with `key: value` as the object's first member, laid out like the member
/// after it (or, in an empty object, one level in from the object's line). `value`
/// renders the value for the member's indentation.
pub fn insert_first(
    text: &str,
    object: &Object,
    key: &str,
    value: impl Fn(&str) -> String,
) -> String {
    let key = serde_json::Value::from(key).to_string();
    match object.members.first() {
        Some(first) => {
            let leading = &text[object.open + 1..first.start];
            let indent = leading.rsplit('\n').next().unwrap_or("");
            let member = format!("{key}: {},{leading}", value(indent));
            splice(text, first.start..first.start, &member)
        }
        None => {
            let outer = line_indent(text, object.open);
            let inner = format!("{outer}  ");
            let member = format!("\n{inner}{key}: {}\n{outer}", value(&inner));
            splice(text, object.open + 1..object.close, &member)
        }
    }
}

/// `text` without `object`'s member at `index`, with the comma and space that went
/// with it.
pub fn remove(text: &str, object: &Object, index: usize) -> String {
    let members = &object.members;
    let range = if let Some(next) = members.get(index + 1) {
        members[index].start..next.start
    } else if index > 0 {
        members[index - 1].end..members[index].end
    } else {
        object.open + 1..object.close
    };
    splice(text, range, "")
}

fn splice(text: &str, range: std::ops::Range<usize>, with: &str) -> String {
    let mut out = String::with_capacity(text.len() + with.len());
    out.push_str(&text[..range.start]);
    out.push_str(with);
    out.push_str(&text[range.end..]);
    out
}

/// The spaces and tabs that start the line holding byte `at`.
fn line_indent(text: &str, at: usize) -> &str {
    let line = text[..at].rfind('\n').map_or(0, |n| n + 1);
    let rest = &text[line..at];
    &rest[..rest.len() - rest.trim_start_matches([' ', '\t']).len()]
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while b
        .get(i)
        .is_some_and(|c| matches!(c, b' ' | b'\t' | b'\n' | b'\r'))
    {
        i += 1;
    }
    i
}

/// Just past the string whose opening quote is at `i`.
fn string_end(b: &[u8], i: usize) -> Result<usize, String> {
    if b.get(i) != Some(&b'"') {
        return Err(format!("no string at byte {i}"));
    }
    let mut j = i + 1;
    while let Some(&c) = b.get(j) {
        match c {
            b'\\' => j += 2,
            b'"' => return Ok(j + 1),
            _ => j += 1,
        }
    }
    Err(format!("a string at byte {i} never ends"))
}

/// Just past the value that starts at `i`.
fn value_end(b: &[u8], i: usize) -> Result<usize, String> {
    match b.get(i) {
        Some(b'"') => string_end(b, i),
        Some(b'{') | Some(b'[') => {
            let mut depth = 0usize;
            let mut j = i;
            while let Some(&c) = b.get(j) {
                match c {
                    b'"' => {
                        j = string_end(b, j)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Ok(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
            Err(format!("a value at byte {i} never ends"))
        }
        Some(_) => {
            let mut j = i;
            while b
                .get(j)
                .is_some_and(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'+' | b'.'))
            {
                j += 1;
            }
            if j == i {
                return Err(format!("no value at byte {i}"));
            }
            Ok(j)
        }
        None => Err("the text ends where a value should be".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(indent: &str) -> String {
        let _ = indent;
        "\"TRUST_FOLDER\"".into()
    }

    #[test]
    fn adds_and_removes_a_member_leaving_the_rest_as_written() {
        let text = "{\n  \"/a\": \"TRUST_FOLDER\",\n  \"/b\": \"DO_NOT_TRUST\"\n}";
        let added = insert_first(text, &top(text).expect("test input"), "/w", plain);
        assert_eq!(
            added,
            "{\n  \"/w\": \"TRUST_FOLDER\",\n  \"/a\": \"TRUST_FOLDER\",\n  \"/b\": \"DO_NOT_TRUST\"\n}"
        );
        serde_json::from_str::<serde_json::Value>(&added).expect("valid");
        let object = top(&added).expect("test input");
        assert_eq!(remove(&added, &object, 0), text);
        // Last and middle members too.
        let object = top(text).expect("test input");
        assert_eq!(remove(text, &object, 1), "{\n  \"/a\": \"TRUST_FOLDER\"\n}");
        let one = "{\n  \"/a\": \"TRUST_FOLDER\"\n}";
        assert_eq!(remove(one, &top(one).expect("test input"), 0), "{}");
    }

    #[test]
    fn an_empty_or_compact_object_gets_a_valid_member() {
        for (text, want) in [
            ("{}", "{\n  \"/w\": \"TRUST_FOLDER\"\n}"),
            ("{\"/a\":1}", "{\"/w\": \"TRUST_FOLDER\",\"/a\":1}"),
        ] {
            let added = insert_first(text, &top(text).expect("test input"), "/w", plain);
            assert_eq!(added, want);
            serde_json::from_str::<serde_json::Value>(&added).expect("valid");
        }
    }

    #[test]
    fn nested_objects_and_strings_with_braces_are_skipped_whole() {
        let text = r#"{"a": {"x": "}\"{", "y": [1, {"z": null}]}, "projects": {"/p": {"t": true}}, "n": -1.5e3}"#;
        let object = top(text).expect("test input");
        let keys: Vec<_> = object.members.iter().map(|m| m.key.as_str()).collect();
        assert_eq!(keys, ["a", "projects", "n"]);
        let projects = object_at(text, object.member("projects").expect("test input").value)
            .expect("test input");
        assert_eq!(projects.members[0].key, "/p");
        assert!(top("{\"a\": 1} x").is_err());
        assert!(top("{\"a\": 1,}").is_err());
        assert!(top("// c\n{}").is_err());
    }
}
