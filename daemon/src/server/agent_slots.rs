//! Connections per agent: one agent's processes share a budget well below the daemon's
//! own cap, so that an agent cannot hold every connection the user needs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

#[derive(Clone)]
pub struct AgentSlots {
    max: usize,
    open: Arc<Mutex<HashMap<String, usize>>>,
}

/// One agent's open connection; gives its slot back when dropped.
pub struct AgentSlot {
    open: Arc<Mutex<HashMap<String, usize>>>,
    agent: String,
}

impl AgentSlots {
    pub fn new(max: usize) -> AgentSlots {
        AgentSlots {
            max,
            open: Arc::default(),
        }
    }

    /// A slot for one more connection of `agent`, or why there is none.
    pub fn take(&self, agent: &str) -> Result<AgentSlot, String> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let count = open.entry(agent.to_string()).or_default();
        if *count >= self.max {
            return Err(format!(
                "agent {agent} already has {count} connections open, the most one agent may \
                 (agent_max_connections); close idle ones"
            ));
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
    use super::AgentSlots;

    #[test]
    fn each_agent_has_its_own_budget_and_gets_slots_back() {
        let slots = AgentSlots::new(2);
        let a1 = slots.take("a").expect("first");
        let _a2 = slots.take("a").expect("second");
        assert!(slots.take("a").is_err());
        let _b = slots.take("b").expect("another agent");
        drop(a1);
        assert!(slots.take("a").is_ok());
    }
}
