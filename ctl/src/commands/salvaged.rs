use crate::connect::{connect, dirs};
use crate::output::{ago, print_json, safe, safe_path, table};
use anyhow::Result;
use grove_proto::methods::{Empty, Salvaged};
use std::process::ExitCode;

pub fn run(json: bool) -> Result<ExitCode> {
    let result = connect(&dirs()?)?.call::<Salvaged>(&Empty {})?;
    if json {
        print_json(&result)?;
    } else if result.refs.is_empty() {
        println!("no salvage refs");
    } else {
        let rows = result
            .refs
            .iter()
            .map(|r| {
                vec![
                    safe(&r.name),
                    safe(&r.commit.chars().take(10).collect::<String>()),
                    ago(r.time_ms),
                    safe_path(&r.repo),
                    safe(&r.subject),
                ]
            })
            .collect();
        println!(
            "{}",
            table(&["REF", "COMMIT", "WHEN", "REPO", "SUBJECT"], rows)
        );
        println!("bring one back with `grove restore <ref>`");
    }
    Ok(ExitCode::SUCCESS)
}
