//! GC (CNI spec 1.1 §2 `GC`, §3 "Garbage-collecting a network"): stale sandboxes deleted from
//! their records (or Multus's scratch cache), orphaned lock and temporary files removed, then
//! every delegate network given its attachments of live sandboxes as valid. Every failure is
//! reported, and none stops the rest.

use std::collections::BTreeSet;
use std::time::Duration;

use cni::error::{CniError, ErrorCode, ErrorList};
use cni::request::GcAttachment;
use cni::skel::CmdArgs;
use netattach::device_info_files;

use super::Plumb;
use super::call::{Call, delegates_runner};
use super::known::recorded_sandboxes;
use crate::container_lock::{self, Turn, node_call};
use crate::execute::{Executor, Sandbox};
use crate::multus_cache;
use crate::record::Record;

/// How old a temporary file of [`cni::cache::stage`] must be for GC to remove it: far above
/// any CNI call's length (the runtime gives up on a call after a few minutes at most), so a
/// live writer's file is never taken.
pub const STAGED_FILE_MAX_AGE: Duration = Duration::from_secs(3600);

/// A sweep of one directory's temporary files ([`cni::cache::sweep_staged`] and the like).
type Sweep = fn(&std::path::Path, Duration) -> Result<Vec<std::path::PathBuf>, CniError>;

impl Plumb<'_> {
    pub(super) fn cmd_gc(&self, args: &CmdArgs) -> Result<(), CniError> {
        let call = self.call(args)?;
        let _running = node_call::begin(&call.records, self.caller.pid(), "GC")?;
        self.do_gc(&call, args)
    }

    pub(super) fn do_gc(&self, call: &Call, args: &CmdArgs) -> Result<(), CniError> {
        // plumb's own valid attachments, as the runtime sees them: one per sandbox. Without a
        // readable list nothing is touched: an empty list would mean "delete every pod".
        let list = args
            .config
            .get("cni.dev/valid-attachments")
            .or_else(|| args.config.get("cni.dev/attachments"))
            .ok_or_else(|| {
                CniError::new(
                    ErrorCode::InvalidConfig,
                    "GC without \"cni.dev/valid-attachments\": refusing to guess which \
                     sandboxes are gone",
                )
            })?;
        let valid: Vec<GcAttachment> = serde_json::from_value(list.clone()).map_err(|e| {
            CniError::new(
                ErrorCode::InvalidConfig,
                format!("GC: \"cni.dev/valid-attachments\" is not a list of attachments: {e}"),
            )
        })?;
        let mut live: BTreeSet<String> = valid.into_iter().map(|a| a.container_id).collect();
        let exec = self.executor(call);
        // The DELs of sandboxes Multus attached, with the delegates' results from its cache.
        let multus_runner = delegates_runner(
            &call.config,
            &args.path,
            &call.log,
            call.config.multus_cni_dir.clone(),
        );
        let multus_exec = Executor {
            cni: &multus_runner,
            ..self.executor(call)
        };
        // Every failure is reported, and none stops the rest (CNI spec: GC continues).
        let mut errors = ErrorList::default();
        let mut attached_by_hand = Vec::new();
        let mut busy = Vec::new();
        // Stale sandboxes whose DEL from their record failed: left to the next GC, not tried
        // again from Multus's scratch file, which would run the same DELs again.
        let mut failed = BTreeSet::new();
        match call.records.list() {
            Ok(ids) => {
                for id in ids.iter().filter(|id| !live.contains(id.as_str())) {
                    // What `plumb attach` made is no runtime's: the runtime's list cannot name
                    // it, and only `plumb detach` removes it. An unreadable record goes on to
                    // DEL, which reports it.
                    if let Ok(Some(r)) = call.records.load(id)
                        && r.standalone
                    {
                        call.log.verbose(&format!(
                            "GC: {id} was attached by `plumb attach`; left to `plumb detach`"
                        ));
                        attached_by_hand.push(id.clone());
                        continue;
                    }
                    let Some(turn) = stale_turn(call, id, &mut errors, &mut busy) else {
                        continue;
                    };
                    let stale = Sandbox {
                        container_id: id.clone(),
                        ..Sandbox::default()
                    };
                    // As do_del: a record beside a Multus scratch file is what a DEL from that
                    // file could not finish, and its delegates' results are in Multus's cache.
                    let scratch = multus_cache::find(&call.config.multus_cni_dir, id)
                        .ok()
                        .flatten();
                    let exec = if scratch.is_some() {
                        &multus_exec
                    } else {
                        &exec
                    };
                    let deleted = exec.del(&stale, "").and_then(|_| match &scratch {
                        Some(path) => multus_cache::remove(path),
                        None => Ok(()),
                    });
                    match deleted {
                        Ok(()) => turn.end_for_good(),
                        Err(e) => {
                            errors.push(e.context(format!("GC of stale container {id}")));
                            failed.insert(id.clone());
                        }
                    }
                }
            }
            Err(e) => errors.push(e.into()),
        }
        // Sandboxes Multus attached before plumb replaced it on this node, whose DEL never
        // came (the node went down with them, say) and that the runtime no longer has: DEL
        // from Multus's scratch cache as their DEL would have, so that their addresses go even
        // with delegates that have no GC, and the file with them. One that had a record beside
        // its file (a DEL that stopped part-way) was deleted above, its file with it.
        match multus_cache::list(&call.config.multus_cni_dir) {
            Ok(ids) => {
                for id in ids
                    .iter()
                    .filter(|id| !live.contains(id.as_str()) && !failed.contains(*id))
                {
                    let path = call.config.multus_cni_dir.join(id);
                    // With `cniDir` set, Multus's directory is plumb's own (/var/lib/cni, say),
                    // where a file of another tool's must not fail every GC: what is no scratch
                    // cache (or a broken one, which names no delegate to DEL) is passed over,
                    // logged.
                    if let Err(e) = multus_cache::load(&path, call.config.cni_version) {
                        call.log
                            .verbose(&format!("GC: {id} passed over: {}", e.msg));
                        continue;
                    }
                    let Some(turn) = stale_turn(call, id, &mut errors, &mut busy) else {
                        continue;
                    };
                    // Its DEL may have come between the look above and the turn: it removed
                    // the file, and there is nothing left to do (the turn's lock file aside).
                    if !path.exists() {
                        turn.end_for_good();
                        continue;
                    }
                    let stale = Sandbox {
                        container_id: id.clone(),
                        ..Sandbox::default()
                    };
                    // The runtime's interface name for the first network, where Multus kept
                    // none: every CRI runtime gives `eth0`.
                    let stale_args = CmdArgs {
                        container_id: id.clone(),
                        netns: String::new(),
                        ifname: "eth0".into(),
                        ..args.clone()
                    };
                    match self.del_from_multus_cache(call, &stale_args, &multus_exec, &stale, &path)
                    {
                        Ok(()) => turn.end_for_good(),
                        Err(e) => errors.push(e.context(format!("GC of stale container {id}"))),
                    }
                }
            }
            Err(e) => errors.push(e.context("GC")),
        }
        live.extend(attached_by_hand);
        live.extend(busy);
        match container_lock::sweep_orphans(&call.records) {
            Ok(removed) => {
                for f in removed {
                    call.log.verbose(&format!(
                        "GC: removed {}, the lock file of a container with no record",
                        f.display()
                    ));
                }
            }
            Err(e) => errors.push(e.context("GC")),
        }
        // Temporary files of writers killed between writing and renaming (a record's, a cached
        // result's, a device-info file's): nothing else would ever remove them.
        let device_info_dir = call.device_info.cni_dir();
        for (dir, sweep) in [
            (
                call.records.dir().to_path_buf(),
                cni::cache::sweep_staged as Sweep,
            ),
            (call.cni.cache.results_dir(), cni::cache::sweep_staged),
            (device_info_dir, device_info_files::sweep_temporaries),
        ] {
            match sweep(&dir, STAGED_FILE_MAX_AGE) {
                Ok(removed) => {
                    for f in removed {
                        call.log.verbose(&format!(
                            "GC: removed {}, a temporary file its writer left",
                            f.display()
                        ));
                    }
                }
                Err(e) => errors.push(e.context("GC")),
            }
        }
        // Then each delegate network, with every attachment of a live sandbox as valid.
        // Multus's result cache too, when it is apart from plumb's (no `cniDir`): a pod Multus
        // attached before plumb replaced it is live, and its attachments are there only.
        let multus_cache = (call.config.multus_cni_dir != call.config.cni_dir)
            .then(|| cni::cache::ResultCache::new(&call.config.multus_cni_dir));
        let cached = match call.cni.cache.list(None).and_then(|mut c| {
            if let Some(m) = &multus_cache {
                c.extend(m.list(None)?);
            }
            Ok(c)
        }) {
            Ok(c) => c,
            Err(e) => {
                // Without it a live attachment would look stale, and lose its address.
                errors.push(e.context("GC of the delegate networks skipped"));
                return errors.into_result();
            }
        };
        // The records left now that the stale sandboxes are gone.
        let (records, mut unreadable) = recorded_sandboxes(call);
        let (networks, unusable) = match call
            .networks()
            .and_then(|n| self.known_networks(call, &records, &*n))
        {
            Ok(known) => known,
            Err(e) => {
                errors.push(e.context("GC of the delegate networks skipped"));
                return errors.into_result();
            }
        };
        unreadable.extend(unusable);
        // A stale sandbox's unreadable record was reported by its DEL above, and a directory
        // that cannot be listed by the loop over them. A live sandbox's attachments cannot be
        // told, and would look stale to every network: no network GC.
        let mut live_unknown = false;
        for (id, e) in unreadable {
            match id {
                Some(id) if !live.contains(id.as_str()) => {}
                Some(_) => {
                    live_unknown = true;
                    errors.push(e);
                }
                None => live_unknown = true,
            }
        }
        if live_unknown {
            errors.push(CniError::new(
                ErrorCode::DecodingFailure,
                "GC of the delegate networks skipped: a live sandbox's attachments cannot be \
                 told from its record",
            ));
            return errors.into_result();
        }
        let in_use = attachments_in_use(&cached, &records);
        for list in networks {
            let valid: Vec<GcAttachment> = in_use
                .iter()
                .filter(|(net, id, _)| *net == list.name && live.contains(id.as_str()))
                .map(|(_, id, ifname)| GcAttachment {
                    container_id: id.clone(),
                    ifname: ifname.clone(),
                })
                .collect();
            if let Err(e) = call.cni.gc_network_list(&list, &valid) {
                errors.push(e);
            }
        }
        errors.into_result()
    }
}

/// Every attachment plumb knows of, as (network name, container ID, interface): those of the
/// result cache (plumb's delegates, or Multus's before a migration) and those of the records
/// (the cache is not written durably; the records are).
fn attachments_in_use(
    cached: &[cni::cache::CachedAttachment],
    records: &[Record],
) -> BTreeSet<(String, String, String)> {
    let mut in_use: BTreeSet<_> = cached
        .iter()
        .map(|c| {
            let (net, id, ifname) = (&c.network_name, &c.container_id, &c.if_name);
            (net.clone(), id.clone(), ifname.clone())
        })
        .collect();
    for r in records {
        for a in &r.attachments {
            // The list's name, as `recorded_list` would read it (no need to parse it all again:
            // `known_networks` already did, and left out what it could not read).
            if let Some(name) = a.config.get("name").and_then(serde_json::Value::as_str) {
                in_use.insert((name.to_string(), r.container_id.clone(), a.ifname.clone()));
            }
        }
    }
    in_use
}

/// The turn of `id`, a container GC found stale, to delete it; none when a call still runs for
/// it (its lock held), which says it is not gone, or not yet: it is then left alone, in `busy`,
/// its attachments kept as live, for the next GC.
fn stale_turn(
    call: &Call,
    id: &str,
    errors: &mut ErrorList,
    busy: &mut Vec<String>,
) -> Option<Turn> {
    match container_lock::try_take_for(&call.records, id) {
        Ok(Some(turn)) => return Some(turn),
        Ok(None) => call
            .log
            .verbose(&format!("GC: {id} has a call running; left to the next GC")),
        Err(e) => errors.push(e.context(format!("GC of stale container {id}"))),
    }
    busy.push(id.to_string());
    None
}
