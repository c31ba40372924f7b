//! Connections per agent and per agent tree: one agent's processes, and one tree of
//! agents (an agent the user spawned and its descendants), share budgets well below
//! the daemon's own cap, so that neither can hold every connection the user or
//! another tree needs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Whose budget a set of slots is.
#[derive(Clone, Copy)]
pub enum Budget {
    Agent,
    Tree,
}

#[derive(Clone)]
pub struct AgentSlots {
    max: usize,
    budget: Budget,
    open: Arc<Mutex<HashMap<String, usize>>>,
}

/// One agent's open connection; gives its slot back when dropped.
pub struct AgentSlot {
    open: Arc<Mutex<HashMap<String, usize>>>,
    agent: String,
}

impl AgentSlots {
    pub fn new(max: usize, budget: Budget) -> AgentSlots {
        AgentSlots {
            max,
            budget,
            open: Arc::default(),
        }
    }

    /// A slot for one more connection of `agent`, or why there is none.
    pub fn take(&self, agent: &str) -> Result<AgentSlot, String> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let count = open.entry(agent.to_string()).or_default();
        if *count >= self.max {
            return Err(match self.budget {
                Budget::Agent => format!(
                    "agent {agent} already has {count} connections open, the most one agent \
                     may (agent_max_connections); close idle ones"
                ),
                Budget::Tree => format!(
                    "the agents of agent {agent}'s tree (it and its descendants) already hold \
                     {count} connections, the most one tree may (tree_max_connections); close \
                     idle ones, or kill agents of the tree (`grove kill`)"
                ),
            });
        }
        *count += 1;
        Ok(AgentSlot {
            open: self.open.clone(),
            agent: agent.to_string(),
        })
    }
}

impl Drop for AgentSlot {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = open.get_mut(&self.agent) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.remove(&self.agent);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{AgentSlots, Budget};

    #[test]
    fn each_agent_has_its_own_budget_and_gets_slots_back() {
        let slots = AgentSlots::new(2, Budget::Agent);
        let a1 = slots.take("a").expect("first");
        let _a2 = slots.take("a").expect("second");
        assert!(slots.take("a").is_err());
        let _b = slots.take("b").expect("another agent");
        drop(a1);
        assert!(slots.take("a").is_ok());
    }

    #[test]
    fn a_trees_refusal_names_its_setting_and_what_to_do() {
        let slots = AgentSlots::new(1, Budget::Tree);
        let _root = slots.take("root").expect("first");
        let why = slots.take("root").err().expect("refused");
        assert!(
            why.contains("tree_max_connections") && why.contains("grove kill"),
            "{why}"
        );
    }
}
