//! `grove ask` (inside an agent: a question, then the answer on stdout) and `grove
//! answer` (the user, or the asker's parent agent).

use crate::connect::{connect, dirs};
use crate::exit::NO_ANSWER;
use crate::output::{print_json, safe};
use anyhow::Result;
use grove_proto::methods::{Answer, AnswerParams, Ask, AskParams};
use std::process::ExitCode;

fn token() -> Option<String> {
    std::env::var("GROVE_TOKEN").ok().filter(|t| !t.is_empty())
}

pub fn ask(
    question: String,
    choices: Vec<String>,
    timeout: Option<&str>,
    json: bool,
) -> Result<ExitCode> {
    let timeout_ms = timeout.map(super::spawn::duration_ms).transpose()?;
    let params = AskParams {
        text: question,
        choices,
        timeout_ms,
        // The same through every retry: after a daemon restart this ask finds its
        // question (or its answer) again.
        ask_id: Some(grove_proto::retry::new_idempotency_key()),
        token: token(),
    };
    let result = connect(&dirs()?)?.call::<Ask>(&params)?;
    if json {
        print_json(&result)?;
    }
    match result.answered {
        Some(answered) => {
            if !json {
                println!("{}", answered.answer);
            }
            Ok(ExitCode::SUCCESS)
        }
        None => {
            eprintln!(
                "grove: no answer within {}; the question was withdrawn",
                timeout.unwrap_or("the timeout")
            );
            Ok(ExitCode::from(NO_ANSWER))
        }
    }
}

pub fn answer(id: String, text: String, json: bool) -> Result<ExitCode> {
    let answered = connect(&dirs()?)?.call::<Answer>(&AnswerParams {
        id: id.clone(),
        text,
        token: token(),
    })?;
    if json {
        print_json(&answered)?;
    } else {
        println!(
            "answered {} ({}): {} (the decision is checkpoint {} of its session)",
            safe(&id),
            safe(&answered.question),
            safe(&answered.answer),
            answered.checkpoint
        );
    }
    Ok(ExitCode::SUCCESS)
}
