use super::super::connection::{ok_head, Conn, OK_TAIL};
use super::super::Ctx;
use crate::core::{ListPage, Listed};
use grove_proto::methods::ListParams;
use grove_proto::MAX_LINE_BYTES;
use serde_json::Value;
use std::sync::Arc;

const MAX_PAGE: usize = 1_000;
/// Serialized records per answer stay under this, inside the 1 MiB line cap with room
/// to spare for the envelope (and any id a client may choose).
const MAX_PAGE_BYTES: usize = MAX_LINE_BYTES - 64 * 1024;

/// Inside an agent, only the agents it spawned. Long lists come in pages: `next` says
/// where the following page starts. The core keeps every record's JSON ready, so the
/// page is those texts joined into the answer's line.
pub async fn handle(ctx: &Ctx, conn: &Conn, id: Option<Value>, params: ListParams) {
    let limit = params
        .limit
        .map_or(MAX_PAGE, |l| (l as usize).clamp(1, MAX_PAGE));
    let asked = ListPage {
        all: params.all,
        within: conn.agent().map(|me| me.id.clone()),
        after: params.after,
        // One more than fits says whether a page follows.
        limit: limit + 1,
    };
    let agents = match ctx.core.list(asked).await {
        Ok(agents) => agents,
        Err(e) => return conn.respond(id, Err(e.into())).await,
    };
    let Some(id) = id else {
        return;
    };
    let mut line = page(&agents, limit, MAX_PAGE_BYTES, ok_head(&id, 0));
    line.extend_from_slice(OK_TAIL);
    conn.send_line(line).await;
}

/// Appends the result `{"agents": [...], "next": ...}` to `out`, holding the first of
/// `agents`: at most `limit`, and no more than `max_bytes` of records unless one alone
/// is longer.
fn page(agents: &[Arc<Listed>], limit: usize, max_bytes: usize, mut out: Vec<u8>) -> Vec<u8> {
    let (mut count, mut bytes) = (0, 0);
    for agent in agents.iter().take(limit) {
        let more = agent.json.len() + usize::from(count > 0);
        if count > 0 && bytes + more > max_bytes {
            break;
        }
        (count, bytes) = (count + 1, bytes + more);
    }
    let next = agents[..count].last().filter(|_| count < agents.len());
    out.reserve(bytes + next.map_or(0, |last| last.id.len() * 2 + 16) + 64);
    out.extend_from_slice(br#"{"agents":["#);
    for (n, agent) in agents[..count].iter().enumerate() {
        if n > 0 {
            out.push(b',');
        }
        out.extend_from_slice(agent.json.as_bytes());
    }
    out.push(b']');
    if let Some(last) = next {
        out.extend_from_slice(br#","next":"#);
        // A string always serializes.
        let _ = serde_json::to_writer(&mut out, &last.id);
    }
    out.push(b'}');
    out
}

#[cfg(test)]
mod tests {
    use super::page;
    use crate::core::Listed;
    use grove_proto::methods::AgentList;
    use grove_proto::types::AgentRecord;
    use std::sync::Arc;

    fn record(id: usize, argv_len: usize) -> AgentRecord {
        let mut record: AgentRecord = serde_json::from_value(serde_json::json!({
            "id": format!("{id:08x}"), "name": null, "session": "s", "repo": "/r",
            "base_ref": "main", "base_commit": "c", "branch": "grove/x", "worktree": "/w",
            "log_path": "/l", "argv": [], "env_names": [], "limits": {}, "timeout_ms": null,
            "keep": false, "status": "collected", "outcome": "succeeded", "pid": null,
            "created_at_ms": 1_000 + id, "started_at_ms": null, "ended_at_ms": null,
            "collected_at_ms": null, "exit_code": 0, "exit_signal": null,
            "head_commit": null, "files_changed": null, "insertions": null,
            "deletions": null, "branch_exists": false, "salvaged": false, "error": null
        }))
        .expect("a record");
        record.argv = vec!["é\"\n".repeat(argv_len)];
        record
    }

    fn listed(records: &[AgentRecord]) -> Vec<Arc<Listed>> {
        records.iter().map(|r| Arc::new(Listed::of(r))).collect()
    }

    fn joined(agents: &[Arc<Listed>], limit: usize, max_bytes: usize) -> AgentList {
        let answer = page(agents, limit, max_bytes, b"<".to_vec());
        assert_eq!(
            answer.first(),
            Some(&b'<'),
            "what was in the buffer stays first"
        );
        serde_json::from_slice(&answer[1..]).expect("a valid agent.list result")
    }

    #[test]
    fn pages_hold_whole_records_within_the_byte_cap_and_name_the_next_start() {
        let records: Vec<AgentRecord> = (0..50).map(|i| record(i, 100)).collect();
        let refs = listed(&records);
        let one = serde_json::to_vec(&records[0]).expect("encode").len();
        let cap = one * 10 + 9;
        let mut seen = Vec::new();
        let mut start = 0;
        loop {
            let list = joined(&refs[start..], 1_000, cap);
            let bytes: usize = list
                .agents
                .iter()
                .map(|a| serde_json::to_vec(a).expect("encode").len() + 1)
                .sum();
            assert!(bytes - 1 <= cap, "{bytes} bytes over the cap of {cap}");
            assert_eq!(list.agents.len(), 10.min(records.len() - start));
            start += list.agents.len();
            seen.extend(list.agents);
            match list.next {
                Some(next) => assert_eq!(next, seen[seen.len() - 1].id),
                None => break,
            }
        }
        assert_eq!(seen, records);
    }

    #[test]
    fn a_record_longer_than_the_cap_comes_alone_and_limit_counts() {
        let records: Vec<AgentRecord> = (0..3).map(|i| record(i, 1_000)).collect();
        let refs = listed(&records);
        let list = joined(&refs, 1_000, 100);
        assert_eq!(list.agents, [records[0].clone()]);
        assert_eq!(list.next.as_deref(), Some(records[0].id.as_str()));
        let list = joined(&refs, 2, 1 << 20);
        assert_eq!(list.agents, [records[0].clone(), records[1].clone()]);
        assert_eq!(list.next.as_deref(), Some(records[1].id.as_str()));
        let list = joined(&refs, 3, 1 << 20);
        assert_eq!((list.agents.len(), list.next), (3, None));
        let list = joined(&[], 3, 1 << 20);
        assert_eq!((list.agents.len(), list.next), (0, None));
    }
}
