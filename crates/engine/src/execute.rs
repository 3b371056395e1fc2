//! Executing a plan on the node: ADD, DEL and CHECK of every attachment of a pod sandbox
//! through the `cni` crate, one after the other (multi-net spec §7.3), with the attachment
//! record written before each ADD so that DEL can always undo what ADD began (§7.2). ADD stops
//! at the first failure and rolls back; DEL works from the record alone; an attachment with a
//! device gets its device-info file (device-info spec §4.2, §5.1).

use std::net::IpAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};

use cni::error::{CniError, ErrorCode, ErrorList};
use cni::runtime::{CniConfig, RuntimeConf};
use cni::{CniResult, NetworkConfigList};
use netattach::device_info::DeviceInfo;
use netattach::device_info_files::DeviceInfoDirs;
use netattach::runtime_config::capability;
use serde_json::Value;

use crate::devices::{device_info_path, prepare_device_info_file};
use crate::plan::{Attachment, Pod};
use crate::pod_args::NETWORKS_ARG;
use crate::record::{ChangeBasis, RECORD_VERSION, Record, RecordStore, RecordedAttachment};
use crate::routes::DefaultRoutes;

/// The sandbox a CNI call is about.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sandbox {
    pub container_id: String,
    pub netns: String,
    /// `CNI_ARGS` as the runtime gave them; every delegate gets them unchanged.
    pub cni_args: Vec<(String, String)>,
    /// Attached by `plumb attach`, not by a runtime (see [`Record::standalone`]).
    pub standalone: bool,
    /// What ADD records for a later change of the pod's attachments ([`Record::for_changes`]).
    pub for_changes: Option<ChangeBasis>,
}

/// One attachment that ADD completed.
#[derive(Clone, Debug, PartialEq)]
pub struct Added {
    pub attachment: Attachment,
    pub result: CniResult,
    /// What the attachment's device-info file held after ADD (multi-net spec §5.3.7).
    pub device_info: Option<DeviceInfo>,
    /// What the caller should log: the attachment worked, but something about it did not.
    pub warnings: Vec<String>,
}

/// Runs delegates and keeps records.
pub struct Executor<'a> {
    pub cni: &'a CniConfig,
    pub records: &'a RecordStore,
    pub routes: &'a dyn DefaultRoutes,
    /// Where device-info files are.
    pub device_info: &'a DeviceInfoDirs,
}

fn runtime_conf(sandbox: &Sandbox, netns: &str, a: &RecordedAttachment) -> RuntimeConf {
    RuntimeConf {
        container_id: sandbox.container_id.clone(),
        netns: netns.to_string(),
        ifname: a.ifname.clone(),
        args: delegate_args(&sandbox.cni_args),
        capability_args: a.capability_args.clone(),
    }
}

/// The runtime's `CNI_ARGS` as the delegates get them: all but plumb's own selection
/// ([`NETWORKS_ARG`]), after `IgnoreUnknown=true` unless the runtime gave `IgnoreUnknown`.
/// The reference plugins refuse a key they do not know unless `IgnoreUnknown` is set: passing
/// on plumb's key, or the `K8S_POD_*` keys of a runtime that does not set it, failed the first
/// delegate, then the rollback, and every later DEL (which replays the record's arguments) for
/// ever. Multus gives every delegate `IgnoreUnknown=true` first (docs/multus-behaviour.md §2.6), so
/// delegates moved from Multus expect it. Done here, where every delegate call's arguments are
/// made, so a record that holds the runtime's arguments as they came is undone so too.
fn delegate_args(runtime_args: &[(String, String)]) -> Vec<(String, String)> {
    let given = runtime_args.iter().any(|(k, _)| k == "IgnoreUnknown");
    let ignore_unknown = (!given).then(|| ("IgnoreUnknown".to_string(), "true".to_string()));
    ignore_unknown
        .into_iter()
        .chain(
            runtime_args
                .iter()
                .filter(|(k, _)| k != NETWORKS_ARG)
                .cloned(),
        )
        .collect()
}

/// The whole list as JSON, every plugin included (a `.conflist` read from disk may have taken
/// plugins from a sibling directory, which its own bytes do not hold).
fn list_json(list: &NetworkConfigList) -> Value {
    let mut raw = list.raw.clone();
    let plugins = list
        .plugins
        .iter()
        .map(|p| Value::Object(p.raw.clone()))
        .collect();
    raw.insert("plugins".into(), Value::Array(plugins));
    raw.insert(
        "cniVersion".into(),
        Value::String(list.cni_version.to_string()),
    );
    Value::Object(raw)
}

/// What the record keeps of an attachment of sandbox `container_id`: its device-info file too
/// when it has one ([`device_info_path`]), which is also offered to the plugins as
/// `CNIDeviceInfoFile` (device-info spec §5.1). An attachment with a device, a device resource
/// or a plugin declaring `CNIDeviceInfoFile` gets one (device-info spec §4.2): the device
/// plugin's file copied there before its ADD, read back after it for the network-status, and
/// deleted by DEL (the record names it, so DEL needs no kubelet).
fn recorded(a: &Attachment, container_id: &str, dirs: &DeviceInfoDirs) -> RecordedAttachment {
    let device_info_file = device_info_path(dirs, a, container_id);
    let mut capability_args = a.capability_args.clone();
    if let Some(path) = &device_info_file {
        capability_args.insert(
            capability::CNI_DEVICE_INFO_FILE.into(),
            Value::String(path.to_string_lossy().into_owned()),
        );
    }
    // Only an attachment that added to its network's configuration (cni-args, an IPAM claim, a
    // device ID: all in its plugins) has one of its own to keep.
    let network_config =
        (a.network_list.plugins != a.list.plugins).then(|| list_json(&a.network_list));
    RecordedAttachment {
        network: a.network.clone(),
        ifname: a.ifname.clone(),
        config: list_json(&a.list),
        network_config,
        capability_args,
        default: a.is_default,
        default_route: a.default_route.clone(),
        device_info_file,
        pending: false,
    }
}

/// Deletes a recorded attachment's device-info file, if it has one, once it is sure to be that
/// attachment's: a record edited by hand or damaged must not make DEL delete another file.
fn delete_device_info_file(record: &Record, a: &RecordedAttachment) -> Result<(), CniError> {
    let Some(path) = &a.device_info_file else {
        return Ok(());
    };
    let expected =
        netattach::device_info_files::cni_file_name(&a.network, &record.container_id, &a.ifname);
    let in_cni_dir = path
        .parent()
        .and_then(Path::file_name)
        .is_some_and(|d| d == netattach::device_info_files::CNI_SUBDIR);
    if !in_cni_dir || path.file_name().is_none_or(|f| *f != *expected) {
        return Err(CniError::new(
            cni::ErrorCode::DecodingFailure,
            format!(
                "the attachment record names device-info file {}, which is not this \
                 attachment's ({expected} in a \"cni\" directory): not deleting it; check the \
                 record",
                path.display()
            ),
        ));
    }
    netattach::device_info_files::delete(path).map_err(CniError::from)
}

/// The configuration list of a recorded attachment, as its delegates were run with it.
pub fn recorded_list(a: &RecordedAttachment) -> Result<NetworkConfigList, CniError> {
    parse_recorded(&a.config, a)
}

/// The network's own configuration list of a recorded attachment, as GC and STATUS run the
/// network: without what the attachment added to it ([`RecordedAttachment::network_config`]).
pub fn recorded_network_list(a: &RecordedAttachment) -> Result<NetworkConfigList, CniError> {
    parse_recorded(a.network_config.as_ref().unwrap_or(&a.config), a)
}

fn parse_recorded(config: &Value, a: &RecordedAttachment) -> Result<NetworkConfigList, CniError> {
    let bytes = serde_json::to_vec(config).unwrap_or_default();
    NetworkConfigList::from_any_bytes(&bytes).map_err(|e| {
        e.context(format!(
            "attachment record: network {} interface {}",
            a.network, a.ifname
        ))
    })
}

/// For a `default-route` the kernel refused: the first of `gateways` of a family (IPv4, IPv6)
/// of which attachment `a`'s network gave its interface no address (`result`), said with the
/// addresses it did give. Such a gateway is most often a typo of the family (an IPv6 gateway
/// for an IPv4-only network), which the kernel reports only as "No route to host".
fn gateway_of_a_family_not_given(
    gateways: &[IpAddr],
    result: &CniResult,
    a: &Attachment,
) -> Option<String> {
    let gateway = gateways.iter().find(|g| {
        !result
            .ips
            .iter()
            .any(|ip| ip.address.addr.is_ipv4() == g.is_ipv4())
    })?;
    let family = if gateway.is_ipv4() { "IPv4" } else { "IPv6" };
    let given: Vec<String> = result.ips.iter().map(|ip| ip.address.to_string()).collect();
    Some(format!(
        "{gateway} is an {family} gateway, and network {} gave {} no {family} address ({})",
        a.network,
        a.ifname,
        if given.is_empty() {
            "nor any other".to_string()
        } else {
            format!("only {}", given.join(", "))
        }
    ))
}

/// How an attachment is named in errors and logs.
fn describe(network: &str, ifname: &str, i: usize, n: usize) -> String {
    format!(
        "attachment {} of {n} (network {network}, interface {ifname})",
        i + 1
    )
}

/// [`describe`] for a recorded attachment `i` of `n`, saying so when its list was cut to the
/// plugins ADD had started ([`only_started`]): the plugin errors inside number the plugins of
/// the cut list ("1 of 1"), which would otherwise contradict the network's configuration.
fn describe_recorded(a: &RecordedAttachment, i: usize, n: usize) -> String {
    let plugins = |v: &Value| v.get("plugins").and_then(Value::as_array).map(Vec::len);
    let ran = plugins(&a.config);
    let all = a.network_config.as_ref().and_then(plugins);
    match (ran, all) {
        (Some(ran), Some(all)) if ran < all => format!(
            "attachment {} of {n} (network {}, interface {}; its ADD had started only the \
             first {ran} of the network's {all} plugins, so only those are undone)",
            i + 1,
            a.network,
            a.ifname
        ),
        _ => describe(&a.network, &a.ifname, i, n),
    }
}

/// Where an attachment's ADD failed: before its delegates ran, or in them, once `started` of
/// its list's plugins (at least one) had been started.
enum AddFailure {
    BeforeDelegates,
    Delegates { started: usize },
}

/// What a rollback undoes of an attachment whose ADD failed once only the first `started`
/// plugins of its list had been started (the next one could not be: [`CniError::not_started`]):
/// the attachment with its list cut to those plugins. The plugins after them ran nothing; a DEL
/// of the one whose exec failed would most likely fail the same way, and keep the attachment
/// for ever (every DEL of the pod failing) with nothing of it to undo. The cut list is also what the record
/// keeps if the rollback fails, so the runtime's DEL runs the same plugins, and no record format
/// change is needed; the network's whole list is kept as `network_config` for GC and STATUS.
fn only_started(a: &RecordedAttachment, started: usize) -> RecordedAttachment {
    let mut a = a.clone();
    let all = a
        .config
        .get("plugins")
        .and_then(Value::as_array)
        .map(Vec::len);
    if all.is_some_and(|all| started < all) {
        a.network_config.get_or_insert_with(|| a.config.clone());
        if let Some(plugins) = a.config.get_mut("plugins").and_then(Value::as_array_mut) {
            plugins.truncate(started);
        }
    }
    a
}

/// An ADD's record on its way to disk. It must be durable before any delegate acts (a remote
/// IPAM allocation outlives a power loss; a record that did not would leak it). Rather than
/// fsync and only then start the first delegate, plumb starts it and gives it its stdin once
/// the record is durable ([`cni::exec::Exec::hold_next_stdin`]): the fsyncs (about 1 ms, more
/// on a busy disk) overlap the delegate's start-up, which takes longer (about 2 ms for a Go
/// plugin to read its stdin).
struct PendingRecord<'a> {
    exec: &'a dyn cni::exec::Exec,
    /// What the gate's commit gave, once it ran.
    committed: Arc<Mutex<Option<Result<(), CniError>>>>,
}

impl<'a> PendingRecord<'a> {
    fn hand_to_first_delegate(
        exec: &'a dyn cni::exec::Exec,
        staged: cni::cache::Staged,
    ) -> Result<Self, CniError> {
        let committed = Arc::new(Mutex::new(None));
        let outcome = Arc::clone(&committed);
        exec.hold_next_stdin(Box::new(move || {
            let r = staged
                .commit_durable()
                .map_err(|e| e.context("attachment record"));
            *outcome.lock().unwrap_or_else(|p| p.into_inner()) = Some(r.clone());
            r
        }))?;
        Ok(PendingRecord { exec, committed })
    }

    /// Before a first attachment that has a device plugin's device-info file to copy, or once
    /// the first attachment is done or could not start a delegate: the record is in place,
    /// written now if no delegate took it, or this is why it is not. Later calls are no-ops.
    fn settle(&self) -> Result<(), Unwritten> {
        if let Some(gate) = self.exec.take_stdin_gate() {
            return gate().map_err(|error| Unwritten {
                error,
                stopped_a_delegate: false,
            });
        }
        match self
            .committed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            Some(Err(error)) => Err(Unwritten {
                error,
                stopped_a_delegate: true,
            }),
            _ => Ok(()),
        }
    }
}

/// Why an ADD's record is not in place.
struct Unwritten {
    error: CniError,
    /// Whether a delegate took the write (and was stopped when it failed, failing its
    /// attachment with this same error), rather than it being written by plumb itself: after
    /// the attachment ended without starting one, or before its device-info file was copied.
    stopped_a_delegate: bool,
}

impl Executor<'_> {
    /// ADD of every attachment in order, then the default route. Returns what each ADD gave.
    ///
    /// The record names every planned attachment before the first one runs: one durable write
    /// rather than one per attachment (measured: each costs an fsync), and as safe, since DEL
    /// of an attachment that never ran is harmless. A record already there (an ADD repeated
    /// without DEL) is undone first, so nothing it names is forgotten.
    ///
    /// Stops at the first failure (multi-net spec §7.2: "attachments that have not yet been
    /// performed shall not be attempted") and rolls back what it did, in reverse, before
    /// returning the error (`Executor::roll_back`).
    pub fn add(
        &self,
        sandbox: &Sandbox,
        pod: Option<&Pod>,
        attachments: &[Attachment],
    ) -> Result<Vec<Added>, CniError> {
        let n = attachments.len();
        // Every attachment's plugins are found before anything is done (validate before
        // acting): a plugin not installed on the node for a later network fails the
        // ADD with nothing attached, instead of after the networks before it were attached and
        // then undone (a rollback that can fail in turn: macvlan's DEL of a master that is
        // gone). A few `stat`s; `prepare_add` finds them again as it runs each.
        for (i, a) in attachments.iter().enumerate() {
            self.cni
                .find_all(&a.list)
                .map_err(|e| e.context(describe(&a.network, &a.ifname, i, n)))?;
        }
        if self.records.load(&sandbox.container_id)?.is_some() {
            self.del(sandbox, &sandbox.netns).map_err(|e| {
                e.context("undoing the earlier ADD of this sandbox, whose record is still there")
            })?;
        }
        let record = Record {
            version: RECORD_VERSION,
            container_id: sandbox.container_id.clone(),
            netns: sandbox.netns.clone(),
            pod_namespace: pod.map(|p| p.namespace.clone()).unwrap_or_default(),
            pod_name: pod.map(|p| p.name.clone()).unwrap_or_default(),
            pod_uid: pod.map(|p| p.uid.clone()).unwrap_or_default(),
            cni_args: sandbox.cni_args.clone(),
            attachments: self.recorded(&sandbox.container_id, attachments),
            standalone: sandbox.standalone,
            for_changes: sandbox.for_changes.clone(),
        };
        let pending =
            PendingRecord::hand_to_first_delegate(&*self.cni.exec, self.records.stage(&record)?)?;
        // A device-info file plumb copies from a device plugin's (device-info spec §5.1) is
        // plumb's to remove, and after a crash only the record says it is there (a DEL without
        // one plans from the API, which may no longer know the pod). So when the first
        // attachment has one to copy, the record is put in place before it, its fsyncs not
        // overlapping the delegate's start-up; later attachments' copies are made once the
        // first delegate has taken the record's write.
        if attachments
            .first()
            .and_then(|a| a.device.as_ref())
            .is_some_and(|d| d.resource.is_some())
        {
            pending.settle().map_err(|u| u.error)?;
        }
        let mut added = Vec::with_capacity(n);
        for (i, a) in attachments.iter().enumerate() {
            let r = &record.attachments[i];
            let outcome = self.add_one(sandbox, a, r, i, n);
            if i == 0
                && let Err(unwritten) = pending.settle()
            {
                // A record that could not be written: no delegate read its configuration (the
                // first was stopped before it did, or none started), so nothing ran and there
                // is nothing to roll back (nor a device-info file copied: with one to copy, the
                // record was settled before).
                let e = match outcome {
                    // The attachment had failed already, before any delegate took the record's
                    // write (its plugin not found, its device-info file not made, its delegate
                    // not started): that failure is the one to fix first, and the record's
                    // comes with it.
                    Err((original, _)) if !unwritten.stopped_a_delegate => {
                        original.add_details(format!(
                            "and the attachment record could not be written: {}",
                            unwritten.error
                        ))
                    }
                    // Its delegate was stopped by the write: the failure is the write's.
                    _ => unwritten.error,
                };
                return Err(e);
            }
            match outcome {
                Ok(a) => added.push(a),
                // Nothing of this attachment ran: only those before it are undone. Its
                // device-info file may have been copied already (its first plugin then could
                // not be started): the rollback leaves the attachment out of the record, so the
                // file goes now or never.
                Err((e, AddFailure::BeforeDelegates)) => {
                    let e = match delete_device_info_file(&record, r) {
                        Ok(()) => e,
                        Err(left) => e.add_details(format!("device-info file left: {}", left.msg)),
                    };
                    return Err(self.roll_back(sandbox, &record, i, None, e));
                }
                Err((e, AddFailure::Delegates { started })) => {
                    return Err(self.roll_back(sandbox, &record, i + 1, Some(started), e));
                }
            }
        }
        // Done after the first attachment; here only when there were none.
        pending.settle().map_err(|u| u.error)?;
        if let Some(a) = attachments
            .iter()
            .find(|a| a.default_route.as_ref().is_some_and(|g| !g.is_empty()))
        {
            let gateways = a.default_route.as_deref().unwrap_or_default();
            if let Err(e) =
                self.routes
                    .set_default_route(Path::new(&sandbox.netns), &a.ifname, gateways)
            {
                // The route error says "default-route: …" itself.
                let mut e = e.context(format!("network {}", a.network));
                // The kernel says only "No route to host" for a gateway of a family the
                // interface has no address of: say what the network gave it.
                if e.kind() == ErrorCode::InvalidConfig
                    && let Some(got) = added.iter().find(|g| g.attachment.ifname == a.ifname)
                    && let Some(hint) = gateway_of_a_family_not_given(gateways, &got.result, a)
                {
                    e = e.add_details(hint);
                }
                return Err(self.roll_back(sandbox, &record, n, None, e));
            }
        }
        Ok(added)
    }

    /// ADD of one attachment: its plugins found, its device-info file, then its delegates.
    fn add_one(
        &self,
        sandbox: &Sandbox,
        a: &Attachment,
        r: &RecordedAttachment,
        i: usize,
        n: usize,
    ) -> Result<Added, (CniError, AddFailure)> {
        let before = |e: CniError| {
            (
                e.context(describe(&a.network, &a.ifname, i, n)),
                AddFailure::BeforeDelegates,
            )
        };
        let rt = runtime_conf(sandbox, &sandbox.netns, r);
        // A plugin that cannot be found fails the attachment before anything of it ran, so the
        // rollback leaves it out: its DEL could not run either, and would keep the record (and
        // the pod's sandbox) forever.
        let prepared = self.cni.prepare_add(&a.list, &rt).map_err(before)?;
        if let Some(file) = &r.device_info_file {
            prepare_device_info_file(self.device_info, a.device.as_ref(), file).map_err(before)?;
        }
        // A first plugin that could not be started (its exec failed) ran nothing either, and
        // its DEL would fail the same way: the attachment failed before anything of it ran.
        let result =
            self.cni
                .add_prepared(&a.list, &rt, prepared)
                .map_err(|e| match e.started {
                    0 => before(e.error),
                    started => (
                        e.error.context(describe(&a.network, &a.ifname, i, n)),
                        AddFailure::Delegates { started },
                    ),
                })?;
        let mut warnings = Vec::new();
        let device_info = r.device_info_file.as_deref().and_then(|path| {
            netattach::device_info_files::read(path)
                .inspect_err(|e| {
                    warnings.push(format!(
                        "{}: device-info left out of the network-status: {e}",
                        describe(&a.network, &a.ifname, i, n)
                    ))
                })
                .ok()
                .flatten()
        });
        Ok(Added {
            attachment: a.clone(),
            result,
            device_info,
            warnings,
        })
    }

    /// Undoes a failed ADD: DEL of the `attempted` first attachments (those after the failure
    /// never ran), of the last of which only the first `started` plugins when given
    /// ([`only_started`]). Returns the original error, with what the rollback could not undo;
    /// the record then names only that, for the runtime's DEL.
    fn roll_back(
        &self,
        sandbox: &Sandbox,
        record: &Record,
        attempted: usize,
        started: Option<usize>,
        error: CniError,
    ) -> CniError {
        let mut attachments =
            record.attachments[..attempted.min(record.attachments.len())].to_vec();
        if let (Some(started), Some(last)) = (started, attachments.last_mut()) {
            *last = only_started(last, started);
        }
        let ran = Record {
            attachments,
            ..record.clone()
        };
        match self.del_record(sandbox, &sandbox.netns, &ran, Some(record), &|_| false) {
            Ok(_) => {
                self.nothing_left_to_undo(record);
                error
            }
            Err(rollback) => error.add_details(format!(
                "rolling back failed too, the attachment record keeps what is left for DEL: \
                 {rollback}"
            )),
        }
    }

    /// DEL of every attachment of the sandbox's record, in reverse. `netns` is the runtime's
    /// (it may be gone: the delegates still get DEL, so IPAM releases addresses; empty means the
    /// recorded one).
    /// Without a record there is nothing plumb did: `Ok(false)`.
    ///
    /// Works from the record alone (no pod, NAD or API server needed), keeps going past failures
    /// and reports every one of them; the record goes last, and only when everything was undone.
    /// Otherwise it keeps only what is left to undo, so that a retry repeats no DEL that
    /// succeeded.
    /// After an ADD that failed and left no record (it failed before any delegate ran, or
    /// undid all it did): a record of no attachment, so that the runtime's DEL, or GC when no
    /// DEL comes, knows at once that there is nothing to undo, without asking the API server
    /// (which may be what failed). A record already there is never replaced.
    pub fn record_nothing_attached(&self, sandbox: &Sandbox) -> Result<(), CniError> {
        if self.records.load(&sandbox.container_id)?.is_some() {
            return Ok(());
        }
        self.records.save(&Record {
            version: RECORD_VERSION,
            container_id: sandbox.container_id.clone(),
            netns: sandbox.netns.clone(),
            pod_namespace: String::new(),
            pod_name: String::new(),
            pod_uid: String::new(),
            cni_args: sandbox.cni_args.clone(),
            attachments: Vec::new(),
            standalone: sandbox.standalone,
            for_changes: None,
        })
    }

    pub fn del(&self, sandbox: &Sandbox, netns: &str) -> Result<bool, CniError> {
        let Some(record) = self.records.load(&sandbox.container_id)? else {
            return Ok(false);
        };
        self.del_recorded(sandbox, netns, &record)?;
        // The record goes last, once everything was undone.
        self.records.remove(&record.container_id)?;
        Ok(true)
    }

    /// DEL of every attachment of `record`, the sandbox's record as it is on disk.
    fn del_recorded(
        &self,
        sandbox: &Sandbox,
        netns: &str,
        record: &Record,
    ) -> Result<(), CniError> {
        // The record's CNI_ARGS are what ADD gave the delegates; DEL gives them the same.
        let sandbox = Sandbox {
            cni_args: record.cni_args.clone(),
            ..sandbox.clone()
        };
        // No namespace given (GC, or a runtime that forgot it): the one ADD used, so the
        // delegates can remove their interfaces too; if it is gone they only release.
        let netns = if netns.is_empty() {
            &record.netns
        } else {
            netns
        };
        self.del_record(&sandbox, netns, record, Some(record), &|_| false)
            .map(drop)
    }

    /// DEL of attachments planned now rather than recorded (DEL without a record). Returned as
    /// warnings for the log rather than errors, since nothing more can be learnt and failing
    /// would keep the sandbox forever: a device-backed attachment planned without its device
    /// (the kubelet no longer says which) whose DEL fails for want of it, and an attachment
    /// whose plugins cannot be found (skipped).
    pub fn del_planned(
        &self,
        sandbox: &Sandbox,
        netns: &str,
        attachments: &[Attachment],
    ) -> Result<Vec<String>, CniError> {
        let mut warnings = Vec::new();
        // With no record to say it was added, a list whose plugins cannot be found is skipped:
        // its DEL cannot run, and failing on it would keep the sandbox forever.
        let runnable: Vec<&Attachment> = attachments
            .iter()
            .filter(|a| match self.cni.find_all(&a.list) {
                Ok(_) => true,
                Err(e) => {
                    warnings.push(format!(
                        "DEL of network {} (interface {}) skipped: {e}",
                        a.network, a.ifname
                    ));
                    false
                }
            })
            .collect();
        let record = Record {
            version: RECORD_VERSION,
            container_id: sandbox.container_id.clone(),
            netns: netns.to_string(),
            pod_namespace: String::new(),
            pod_name: String::new(),
            pod_uid: String::new(),
            cni_args: sandbox.cni_args.clone(),
            attachments: runnable
                .iter()
                .map(|a| recorded(a, &sandbox.container_id, self.device_info))
                .collect(),
            standalone: sandbox.standalone,
            for_changes: None,
        };
        let without_device =
            |i: usize| runnable[i].resource.is_some() && runnable[i].device.is_none();
        // Nothing is on disk: a DEL that fails part-way leaves a record of what is left, and
        // the retry works from it (no API needed, no DEL repeated).
        let failed = self.del_record(sandbox, netns, &record, None, &without_device)?;
        warnings.extend(
            failed
                .into_iter()
                .map(|w| format!("DEL without its device failed, and is not retried: {w}")),
        );
        Ok(warnings)
    }

    fn recorded(&self, container_id: &str, attachments: &[Attachment]) -> Vec<RecordedAttachment> {
        attachments
            .iter()
            .map(|a| recorded(a, container_id, self.device_info))
            .collect()
    }

    /// DEL of every attachment of `record`, in reverse. An attachment's device-info file goes
    /// once its delegates' DEL succeeded (a retried DEL gives them the same file). A failed DEL
    /// of an attachment that `tolerated` accepts is returned as a warning rather than an error,
    /// and its file deleted all the same. On failure the record on disk keeps what is left
    /// ([`Executor::keep_what_is_left`]); on success the caller decides what becomes of it
    /// (removed by DEL, left naming nothing by a rollback).
    fn del_record(
        &self,
        sandbox: &Sandbox,
        netns: &str,
        record: &Record,
        on_disk: Option<&Record>,
        tolerated: &dyn Fn(usize) -> bool,
    ) -> Result<Vec<String>, CniError> {
        let n = record.attachments.len();
        let mut errors = ErrorList::default();
        let mut warnings = Vec::new();
        // What is still to undo: the attachments whose DEL failed, in their order.
        let mut left = vec![false; n];
        for (i, a) in record.attachments.iter().enumerate().rev() {
            match self.del_one(sandbox, netns, record, a) {
                Ok(()) => {}
                Err(e) if tolerated(i) => {
                    // Given up on: nothing will retry, so its file goes too.
                    if let Err(e) = delete_device_info_file(record, a) {
                        let e = e.context(describe_recorded(a, i, n));
                        warnings.push(e.to_string());
                    }
                    warnings.push(e.context(describe_recorded(a, i, n)).to_string());
                }
                Err(e) => {
                    left[i] = true;
                    errors.push(e.context(describe_recorded(a, i, n)));
                }
            }
        }
        if let Err(e) = errors.into_result() {
            return Err(self.keep_what_is_left(record, on_disk, &left, e));
        }
        Ok(warnings)
    }

    /// DEL of the recorded attachment `a` of `record`: its delegates, then its device-info
    /// file.
    fn del_one(
        &self,
        sandbox: &Sandbox,
        netns: &str,
        record: &Record,
        a: &RecordedAttachment,
    ) -> Result<(), CniError> {
        let list = recorded_list(a)?;
        (self.cni).del_network_list(&list, &runtime_conf(sandbox, netns, a))?;
        delete_device_info_file(record, a)
    }

    /// Undoes a whole ADD that succeeded but must not stand (the pod's status could not be
    /// written): DEL of every attachment, then [`Executor::nothing_left_to_undo`].
    pub fn undo(&self, sandbox: &Sandbox) -> Result<(), CniError> {
        if let Some(record) = self.records.load(&sandbox.container_id)? {
            self.del_recorded(sandbox, &sandbox.netns, &record)?;
            self.nothing_left_to_undo(&record);
        }
        Ok(())
    }

    /// After a failed ADD was wholly undone: a record with no attachment, so that the DEL the
    /// runtime sends after a failed ADD (CNI spec) has nothing to do, rather than planning the
    /// pod's networks from the API again and repeating every DEL (which a plugin that does not
    /// tolerate a second DEL, such as host-device, fails while the netns lives). DEL and GC
    /// remove it. It replaces the full record in one rename, so there is no moment without a
    /// record. Durable like every record (a file half-written at a power loss would read as
    /// corrupt and fail every DEL); best effort: when it cannot be saved, the full record stays,
    /// and the runtime's DEL repeats the DEL of every attachment it lists (those undone, and
    /// those that never ran).
    fn nothing_left_to_undo(&self, record: &Record) {
        let _ = self.records.save(&Record {
            attachments: Vec::new(),
            ..record.clone()
        });
    }

    /// Removes the record of a sandbox that has nothing left to undo (a failed ADD wholly
    /// undone), for callers after which no runtime sends DEL (`plumb attach`). Whether the
    /// sandbox has no record now.
    pub fn forget_if_nothing_left(&self, container_id: &str) -> bool {
        match self.records.load(container_id) {
            Ok(None) => true,
            Ok(Some(r)) if r.attachments.is_empty() => self.records.remove(container_id).is_ok(),
            _ => false,
        }
    }

    /// After a DEL that undid only part of `record`: the record keeps the attachments still to
    /// undo (`left`) and no others, so the retry repeats no DEL that already succeeded (a
    /// plugin whose second DEL fails, such as host-device once its device has left the netns,
    /// would otherwise keep the sandbox forever) and, after a failed rollback, none of an
    /// attachment ADD never reached. `on_disk` is the record this call started from; a record
    /// that changed meanwhile (another call for the container, which the CNI spec forbids) is
    /// left as it is.
    fn keep_what_is_left(
        &self,
        record: &Record,
        on_disk: Option<&Record>,
        left: &[bool],
        error: CniError,
    ) -> CniError {
        let now = self.records.load(&record.container_id).ok().flatten();
        if now.as_ref() != on_disk {
            return error.add_details(
                "the attachment record changed meanwhile (another call for this container?) \
                 and is left as it is",
            );
        }
        if left.iter().all(|l| *l) && on_disk == Some(record) {
            // Nothing was undone: the record on disk is right as it is.
            return error;
        }
        let trimmed = Record {
            attachments: record
                .attachments
                .iter()
                .zip(left)
                .filter(|(_, l)| **l)
                .map(|(a, _)| a.clone())
                .collect(),
            ..record.clone()
        };
        match self.records.save(&trimmed) {
            Ok(()) => error,
            Err(e) => error.add_details(format!(
                "and the attachment record could not be trimmed to what is left, so a retry \
                 repeats every DEL: {e}"
            )),
        }
    }

    /// CHECK of every recorded attachment, in order; the first failure is returned.
    pub fn check(&self, sandbox: &Sandbox) -> Result<(), CniError> {
        let record = self.records.load(&sandbox.container_id)?.ok_or_else(|| {
            CniError::new(
                cni::ErrorCode::UnknownContainer,
                format!(
                    "no attachment record for container {:?} in {}: was it added by plumb?",
                    sandbox.container_id,
                    self.records.dir().display()
                ),
            )
        })?;
        if record.attachments.is_empty() {
            return Err(CniError::new(
                cni::ErrorCode::UnknownContainer,
                format!(
                    "nothing is attached to container {:?}: its ADD failed and was undone",
                    sandbox.container_id
                ),
            ));
        }
        let n = record.attachments.len();
        for (i, a) in record.attachments.iter().enumerate() {
            let list = recorded_list(a)?;
            // CHECK does not exist before 0.4.0 (CNI spec §2): such a delegate has nothing to
            // check, which must not fail the pod's other attachments.
            if list.cni_version < cni::Version::V0_4_0 {
                continue;
            }
            self.cni
                .check_network_list(&list, &runtime_conf(sandbox, &sandbox.netns, a))
                .map_err(|e| e.context(describe(&a.network, &a.ifname, i, n)))?;
        }
        Ok(())
    }
}

mod apply_change;

#[cfg(test)]
mod tests;
