//! A change of a running sandbox's attachments (dynamic attachments: the engine's `change`):
//! DEL of the attachments that go, then ADD of those that come, with the record true at every
//! step, so that the sandbox's own DEL, after the change or after a crash in the middle of it,
//! undoes exactly what is there. The caller holds the container's lock.

use super::*;
use crate::change::Change;

impl Executor<'_> {
    /// Applies `change`, computed from the sandbox's record as it is on disk: the new
    /// attachments' plugins found (else nothing is done); the DEL of each detached attachment
    /// in the order given, the record rewritten without it; then the new attachments named in
    /// the record (durably, pending) before any of their delegates runs, ADD of each in order,
    /// the default route of one that asks for it, and then they are no longer pending
    /// ([`RecordedAttachment::pending`]). From its first write the record follows no
    /// annotation ([`crate::record::ChangeBasis::selection`]), so that a change that fails
    /// part-way, or a daemon stopped in the middle, leaves the next change to plan the pod
    /// again; the caller records the annotation once the change is done. A failed ADD rolls
    /// back what this change attached (the detaches stay done, and are said) and returns its
    /// error. Returns what each ADD gave, and the record as it left it.
    pub fn apply_change(
        &self,
        sandbox: &Sandbox,
        change: &Change,
    ) -> Result<(Vec<Added>, Record), CniError> {
        let mut record = self.records.load(&sandbox.container_id)?.ok_or_else(|| {
            CniError::new(
                ErrorCode::UnknownContainer,
                format!(
                    "sandbox {} has no attachment record: plumb did not attach it",
                    sandbox.container_id
                ),
            )
        })?;
        // The record's CNI_ARGS and netns are what ADD gave the delegates; a change gives the
        // same.
        let sandbox = Sandbox {
            cni_args: record.cni_args.clone(),
            netns: record.netns.clone(),
            ..sandbox.clone()
        };
        let going: Vec<RecordedAttachment> = (change.detach.iter())
            .map(|&i| record.attachments.get(i).cloned())
            .collect::<Option<_>>()
            .ok_or_else(|| {
                CniError::new(
                    ErrorCode::Internal,
                    "the change names an attachment the record does not have",
                )
            })?;
        if change.is_empty() {
            return Ok((Vec::new(), record));
        }
        if let Some(basis) = &mut record.for_changes {
            basis.selection = None;
        }
        // A plugin that cannot be found refuses the change before anything of it is done.
        let m = change.attach.len();
        for (i, a) in change.attach.iter().enumerate() {
            self.cni
                .find_all(&a.list)
                .map_err(|e| e.context(describe(&a.network, &a.ifname, i, m)))?;
        }
        let n = going.len();
        for (i, a) in going.iter().enumerate() {
            self.del_one(&sandbox, &sandbox.netns, &record, a)
                .map_err(|e| e.context(format!("detaching {}", describe_recorded(a, i, n))))?;
            record.attachments.retain(|r| r != a);
            self.records.save(&record)?;
        }
        let detached = |e: CniError| match n {
            0 => e,
            _ => e.add_details(format!(
                "detached before it: {}",
                (going.iter())
                    .map(|a| format!("{} ({})", a.network, a.ifname))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        };
        if change.attach.is_empty() {
            return Ok((Vec::new(), record));
        }
        let kept = record.attachments.len();
        let coming = self.recorded(&sandbox.container_id, &change.attach);
        // Pending until every ADD of the change is done: a daemon stopped before then leaves
        // them for the next change to attach again, not to take as attached.
        (record.attachments).extend(coming.iter().map(|a| RecordedAttachment {
            pending: true,
            ..a.clone()
        }));
        self.records.save(&record).map_err(detached)?;
        let mut added = Vec::with_capacity(m);
        for (i, a) in change.attach.iter().enumerate() {
            match self.add_one(&sandbox, a, &coming[i], i, m) {
                Ok(a) => added.push(a),
                Err((e, failure)) => {
                    let ran = match failure {
                        AddFailure::BeforeDelegates => i,
                        AddFailure::Delegates { .. } => i + 1,
                    };
                    let started = match failure {
                        AddFailure::Delegates { started } => Some(started),
                        AddFailure::BeforeDelegates => None,
                    };
                    return Err(detached(self.roll_back_change(
                        &sandbox,
                        &mut record,
                        kept,
                        ran,
                        started,
                        e,
                    )));
                }
            }
        }
        if let Some(a) =
            (change.attach.iter()).find(|a| a.default_route.as_ref().is_some_and(|g| !g.is_empty()))
        {
            let gateways = a.default_route.as_deref().unwrap_or_default();
            if let Err(e) =
                (self.routes).set_default_route(Path::new(&sandbox.netns), &a.ifname, gateways)
            {
                let e = e.context(format!("network {}", a.network));
                return Err(detached(self.roll_back_change(
                    &sandbox,
                    &mut record,
                    kept,
                    m,
                    None,
                    e,
                )));
            }
        }
        for a in &mut record.attachments[kept..] {
            a.pending = false;
        }
        self.records.save(&record)?;
        Ok((added, record))
    }

    /// Undoes the new attachments of a change that failed: DEL of the first `ran` of those
    /// after the `kept` ones in `record` (of the last only its first `started` plugins when
    /// given), in reverse; the record then names the kept ones and whatever could not be
    /// undone, for the sandbox's DEL. Returns `error`, with what could not be undone.
    fn roll_back_change(
        &self,
        sandbox: &Sandbox,
        record: &mut Record,
        kept: usize,
        ran: usize,
        started: Option<usize>,
        error: CniError,
    ) -> CniError {
        let mut undo: Vec<RecordedAttachment> = record.attachments[kept..kept + ran].to_vec();
        if let (Some(started), Some(last)) = (started, undo.last_mut()) {
            *last = only_started(last, started);
        }
        let mut left = Vec::new();
        let mut failures = Vec::new();
        for a in undo.iter().rev() {
            if let Err(e) = self.del_one(sandbox, &sandbox.netns, record, a) {
                failures.push(format!("{} ({}): {e}", a.network, a.ifname));
                left.push(a.clone());
            }
        }
        record.attachments.truncate(kept);
        left.reverse();
        record.attachments.extend(left);
        let mut error = error;
        if !failures.is_empty() {
            error = error.add_details(format!(
                "rolling back failed too, the attachment record keeps what is left for DEL: {}",
                failures.join("; ")
            ));
        }
        if let Err(e) = self.records.save(record) {
            error = error.add_details(format!(
                "and the attachment record could not be written: {e}"
            ));
        }
        error
    }
}
