//! `grove metrics`: every metric the daemon keeps, and its service levels.

use crate::connect::{connect, dirs};
use crate::output::{cell, print_json_or, table, Tone};
use anyhow::Result;
use comfy_table::Cell;
use grove_proto::methods::{DaemonMetrics, Empty, Series, SloStatus};
use std::process::ExitCode;

pub fn run(json: bool) -> Result<ExitCode> {
    let result = connect(&dirs()?)?.call::<DaemonMetrics>(&Empty {})?;
    print_json_or(json, &result, |result| {
        let rows = result
            .metrics
            .iter()
            .flat_map(|m| {
                m.series.iter().map(|s| {
                    vec![
                        Cell::new(&m.name),
                        Cell::new(labels(s)),
                        Cell::new(value(s)),
                    ]
                })
            })
            .collect();
        println!("{}", table(&["METRIC", "LABELS", "VALUE"], rows));
        let rows = result
            .slos
            .iter()
            .map(|s| {
                let (word, tone) = if s.breached {
                    ("BREACHED", Tone::Bad)
                } else {
                    ("ok", Tone::Good)
                };
                vec![
                    cell(word, Some(tone)),
                    Cell::new(&s.objective),
                    Cell::new(measured(s)),
                ]
            })
            .collect();
        println!("{}", table(&["SLO", "OBJECTIVE", "NOW"], rows));
    })
}

fn labels(s: &Series) -> String {
    s.labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

fn value(s: &Series) -> String {
    match &s.histogram {
        Some(h) if s.value > 0.0 => {
            format!("{} observed, mean {}", s.value, seconds(h.sum / s.value))
        }
        Some(_) => "0 observed".into(),
        None => format!("{}", s.value),
    }
}

fn seconds(s: f64) -> String {
    if s < 1.0 {
        format!("{:.1}ms", s * 1000.0)
    } else {
        format!("{s:.2}s")
    }
}

/// The measured value in the SLO's unit, for people.
pub fn measured(s: &SloStatus) -> String {
    match (s.value, s.unit.as_str()) {
        (None, _) => "no samples in the window".into(),
        (Some(v), "s") => seconds(v),
        (Some(v), "bytes") => format!("{v} bytes"),
        (Some(v), _) => format!("{v}"),
    }
}
