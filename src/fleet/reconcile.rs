//! The reconcile step: the desired set in, what to start, stop, replace
//! and leave alone out.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::lock;
use super::slot::Slot;
use super::spec::{ServerSpec, check_name, name_clash};
use crate::{Error, Result};

/// What [`Fleet::apply`](super::Fleet::apply) did, by server name, each
/// list sorted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ApplyReport {
    /// New slots: servers that were not running.
    pub started: Vec<String>,
    /// Slots stopped: servers removed or disabled.
    pub stopped: Vec<String>,
    /// Slots replaced: the spec changed, so the old slot was stopped and a
    /// new one started.
    pub replaced: Vec<String>,
    /// Slots left alone: the same server (a change of `required` only
    /// included). Their sessions are untouched.
    pub unchanged: Vec<String>,
}

impl ApplyReport {
    /// Whether nothing was started, stopped or replaced.
    pub fn is_noop(&self) -> bool {
        self.started.is_empty() && self.stopped.is_empty() && self.replaced.is_empty()
    }
}

/// The desired set, checked: every name valid and given once.
pub(crate) fn desired(
    servers: impl IntoIterator<Item = (String, ServerSpec)>,
) -> Result<BTreeMap<Arc<str>, ServerSpec>> {
    let mut desired = BTreeMap::new();
    for (name, spec) in servers {
        check_name(&name)?;
        if desired.insert(Arc::from(name.as_str()), spec).is_some() {
            return Err(Error::builder(format!(
                "server name `{name}` is given more than once"
            )));
        }
    }
    for name in desired.keys() {
        if let Some(other) = name_clash(name, desired.keys().map(|n| &**n)) {
            return Err(Error::builder(format!(
                "server names `{name}` and `{other}` would share qualified tool names \
                 (`{other}__...`): rename one"
            )));
        }
    }
    Ok(desired)
}

/// The plan for one reconcile.
pub(crate) struct Plan {
    pub(crate) report: ApplyReport,
    /// Slots to stop (removed, disabled, replaced).
    pub(crate) stop: Vec<Arc<Slot>>,
    /// Servers to start a slot for (started, replaced).
    pub(crate) start: Vec<(Arc<str>, ServerSpec)>,
    /// Slots left alone whose tool filter changed (already set on the
    /// slot): the catalog is to follow.
    pub(crate) refilter: Vec<Arc<Slot>>,
}

/// Compares the running slots with the desired set, by name and spec. It
/// starts and stops nothing (the caller carries the plan out, under the
/// same lock); an unchanged slot's `required` flag and tool filter are
/// updated in place.
pub(crate) fn plan(
    running: &BTreeMap<Arc<str>, Arc<Slot>>,
    desired: BTreeMap<Arc<str>, ServerSpec>,
) -> Plan {
    let mut plan = Plan {
        report: ApplyReport::default(),
        stop: Vec::new(),
        start: Vec::new(),
        refilter: Vec::new(),
    };
    for (name, slot) in running {
        if !desired.get(name).is_some_and(ServerSpec::is_enabled) {
            plan.report.stopped.push(name.to_string());
            plan.stop.push(slot.clone());
        }
    }
    for (name, spec) in desired {
        if !spec.is_enabled() {
            continue;
        }
        match running.get(&name) {
            Some(slot) if slot.spec.same_server(&spec) => {
                slot.required
                    .store(spec.is_required(), std::sync::atomic::Ordering::Release);
                let mut tools = lock(&slot.tools);
                if **tools != **spec.tool_filter() {
                    *tools = spec.tool_filter().clone();
                    plan.refilter.push(slot.clone());
                }
                plan.report.unchanged.push(name.to_string());
            }
            Some(slot) => {
                plan.report.replaced.push(name.to_string());
                plan.stop.push(slot.clone());
                plan.start.push((name, spec));
            }
            None => {
                plan.report.started.push(name.to_string());
                plan.start.push((name, spec));
            }
        }
    }
    plan
}
