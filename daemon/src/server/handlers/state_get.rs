use super::super::Ctx;
use super::{Caller, MAX_PAGE_BYTES};
use crate::Error;
use grove_proto::methods::{StateGetParams, StateGetResult, StatePage};
use serde_json::Value;

/// `state.get`: the state (or one channel) now, or right after a checkpoint. A value
/// too long for one answer comes as pages of its JSON text.
pub async fn handle(
    ctx: &Ctx,
    caller: Caller,
    params: StateGetParams,
) -> Result<StateGetResult, Error> {
    let begun = std::time::Instant::now();
    let (checkpoint, state) = ctx
        .state
        .get_migrated(&caller.session, params.at, params.migrate)
        .await?;
    if params.at.is_some() {
        crate::metrics::restored(begun);
    }
    let state = match &params.channel {
        None => Value::Object(state),
        Some(channel) => state.get(channel).cloned().ok_or_else(|| {
            Error::NotFound(format!(
                "session `{}` has no channel `{channel}`",
                caller.session
            ))
        })?,
    };
    let whole = crate::sessions::json_bytes(&state) as usize;
    if params.offset.is_none() && whole <= MAX_PAGE_BYTES {
        return Ok(StateGetResult {
            session: caller.session,
            checkpoint,
            state,
            page: None,
        });
    }
    let text = serde_json::to_string(&state).map_err(|source| Error::Encode {
        what: "the state",
        source,
    })?;
    let page = page(&text, params.offset.unwrap_or(0), MAX_PAGE_BYTES)?;
    Ok(StateGetResult {
        session: caller.session,
        checkpoint,
        state: Value::Null,
        page: Some(page),
    })
}

/// The page of `text` from `offset` whose escaped form stays within `max_escaped`.
fn page(text: &str, offset: u64, max_escaped: usize) -> Result<StatePage, Error> {
    let start = usize::try_from(offset).unwrap_or(usize::MAX);
    if start > text.len() || !text.is_char_boundary(start) {
        return Err(Error::BadInput(format!(
            "offset {offset} is not the start of a page of this state ({} bytes); use 0 or \
             a previous answer's `page.next`, with its `checkpoint` as `at`",
            text.len()
        )));
    }
    let mut end = start;
    let mut escaped = 0;
    for c in text[start..].chars() {
        escaped += match c {
            '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
            c if (c as u32) < 0x20 => 6,
            c => c.len_utf8(),
        };
        if escaped > max_escaped {
            break;
        }
        end += c.len_utf8();
    }
    Ok(StatePage {
        offset,
        bytes: text.len() as u64,
        text: text[start..end].to_string(),
        next: (end < text.len()).then_some(end as u64),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_join_into_the_text_and_stay_within_the_budget() {
        let text = serde_json::to_string(&serde_json::json!({"a": "x\"y\n\u{1}é".repeat(50)}))
            .expect("json");
        let (mut joined, mut offset) = (String::new(), Some(0));
        while let Some(at) = offset {
            let page = page(&text, at, 40).expect("page");
            assert!(serde_json::to_string(&page.text).expect("json").len() <= 42);
            joined.push_str(&page.text);
            offset = page.next;
        }
        assert_eq!(joined, text);
        assert!(page(&text, text.len() as u64 + 1, 40).is_err());
    }
}
