//! One row of the result table, and whether it meets its goal.

use crate::stats::Summary;
use serde::Serialize;

/// Which figure of a row a goal is about.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// grove's median over the baseline's median.
    Ratio,
    Median,
    P99,
}

#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub enum Op {
    #[serde(rename = "<=")]
    AtMost,
    #[serde(rename = ">=")]
    AtLeast,
}

#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Goal {
    pub metric: Metric,
    pub op: Op,
    pub limit: f64,
}

impl Goal {
    pub fn at_most(metric: Metric, limit: f64) -> Goal {
        Goal {
            metric,
            op: Op::AtMost,
            limit,
        }
    }

    pub fn at_least(metric: Metric, limit: f64) -> Goal {
        Goal {
            metric,
            op: Op::AtLeast,
            limit,
        }
    }

    pub fn text(&self, unit: &str) -> String {
        let op = match self.op {
            Op::AtMost => "≤",
            Op::AtLeast => "≥",
        };
        match self.metric {
            Metric::Ratio => format!("ratio {op} {}", self.limit),
            Metric::Median => format!("{op} {} {unit}", self.limit),
            Metric::P99 => format!("p99 {op} {} {unit}", self.limit),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub case: String,
    pub what: String,
    pub unit: String,
    pub grove: Option<Summary>,
    pub baseline_what: Option<String>,
    pub baseline: Option<Summary>,
    pub ratio: Option<f64>,
    pub goal: Option<Goal>,
    pub met: Option<bool>,
    /// Why there is no figure ("n/a (...)", "error: ..."), or what the figure rests on.
    pub note: Option<String>,
}

impl Row {
    pub fn new(case: &str, what: impl Into<String>, unit: &str) -> Row {
        Row {
            case: case.into(),
            what: what.into(),
            unit: unit.into(),
            grove: None,
            baseline_what: None,
            baseline: None,
            ratio: None,
            goal: None,
            met: None,
            note: None,
        }
    }

    /// A row with no figures, only a reason ("n/a (no warm pool yet)").
    pub fn not_available(case: &str, what: impl Into<String>, why: impl Into<String>) -> Row {
        Row::new(case, what, "").note(why)
    }

    pub fn grove(mut self, summary: Option<Summary>) -> Row {
        self.grove = summary;
        self.finish()
    }

    pub fn baseline(mut self, what: impl Into<String>, summary: Option<Summary>) -> Row {
        self.baseline_what = Some(what.into());
        self.baseline = summary;
        self.finish()
    }

    pub fn goal(mut self, goal: Goal) -> Row {
        self.goal = Some(goal);
        self.finish()
    }

    pub fn note(mut self, note: impl Into<String>) -> Row {
        self.note = Some(note.into());
        self
    }

    /// Recomputes the ratio and whether the goal is met from the figures present.
    fn finish(mut self) -> Row {
        self.ratio = match (&self.grove, &self.baseline) {
            (Some(g), Some(b)) if b.median > 0.0 => Some(g.median / b.median),
            _ => None,
        };
        self.met = self.goal.and_then(|goal| {
            let value = match goal.metric {
                Metric::Ratio => self.ratio,
                Metric::Median => self.grove.map(|g| g.median),
                Metric::P99 => self.grove.and_then(|g| g.p99),
            }?;
            Some(match goal.op {
                Op::AtMost => value <= goal.limit,
                Op::AtLeast => value >= goal.limit,
            })
        });
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratio_and_goal() {
        let row = Row::new("1", "spawn", "ms")
            .grove(Some(Summary::single(40.0)))
            .baseline("git", Some(Summary::single(50.0)))
            .goal(Goal::at_most(Metric::Ratio, 0.8));
        assert_eq!(row.ratio, Some(0.8));
        assert_eq!(row.met, Some(true));
        let slow = Row::new("5", "updates", "/s")
            .goal(Goal::at_least(Metric::Median, 20_000.0))
            .grove(Some(Summary::single(100.0)));
        assert_eq!(slow.met, Some(false));
        let none = Row::not_available("2", "pooled spawn", "n/a (no warm pool yet)");
        assert_eq!(none.met, None);
    }
}
