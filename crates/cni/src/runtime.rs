//! Executing a network configuration list: the runtime side of spec §3 ("Adding an attachment",
//! "Deleting an attachment", "Checking an attachment", "Garbage-collecting a network") and of
//! STATUS and VERSION (spec §2), as libcni's `CNIConfig` is to Go runtimes. Where it differs from
//! libcni, it is on the safe side: nothing runs before every check has passed, DEL goes on past
//! failures, and a plugin's printed error is never taken for a result.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::args;
use crate::cache::{CachedAttachment, ResultCache};
use crate::config::{NetworkConfigList, PluginConfig};
use crate::error::{CniError, ErrorCode, ErrorList};
use crate::exec::{Command, Exec, ExecOutput, PluginEnv, RawExec};
use crate::quote;
use crate::request::{self, Extra, GcAttachment};
use crate::result::CniResult;
use crate::validate;
use crate::version::{Version, VersionInfo};

/// The per-attachment parameters (spec §3 "Attachment Parameters"; libcni `RuntimeConf`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RuntimeConf {
    pub container_id: String,
    pub netns: String,
    pub ifname: String,
    /// `CNI_ARGS` pairs, in order.
    pub args: Vec<(String, String)>,
    /// Capability arguments, from which each plugin's `runtimeConfig` is derived.
    pub capability_args: Map<String, Value>,
}

/// What a plugin printed on stderr while succeeding, for the caller to log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PluginLog {
    pub plugin_type: String,
    pub command: Command,
    pub stderr: String,
}

/// A callback for what succeeding plugins wrote on stderr.
pub type StderrHook = Box<dyn Fn(&PluginLog) + Send + Sync>;

/// One plugin run: which network's, which plugin, which command, how long it took and whether
/// it succeeded (for the caller's measurements).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PluginRun<'a> {
    pub network: &'a str,
    pub plugin_type: &'a str,
    pub command: Command,
    pub took: std::time::Duration,
    pub succeeded: bool,
}

/// A callback for every plugin run.
pub type RanHook = std::sync::Arc<dyn Fn(&PluginRun<'_>) + Send + Sync>;

/// The plugins of an ADD, found before anything runs ([`CniConfig::prepare_add`]).
#[derive(Debug)]
pub struct PreparedAdd {
    binaries: Vec<PathBuf>,
}

/// A failed ADD of a list ([`CniConfig::add_prepared`]): the error, and how many of the list's
/// plugins were started before it ended, in the list's order. Those, and only those, may have
/// done something that a rollback has to DEL: a plugin whose process could not be started
/// ([`CniError::not_started`]), or whose request could not even be built, ran nothing, and a
/// DEL of it would most likely fail the same way, keeping the attachment for ever.
#[derive(Debug)]
pub struct AddError {
    pub error: CniError,
    pub started: usize,
}

/// Runs configuration lists: plugin directories, the result cache and the exec seam.
pub struct CniConfig {
    pub path: Vec<PathBuf>,
    pub cache: ResultCache,
    pub exec: Box<dyn Exec>,
    /// Called with any stderr a succeeding plugin wrote (plugins log there).
    pub on_plugin_stderr: Option<StderrHook>,
    /// Called after every plugin run.
    pub on_plugin_ran: Option<RanHook>,
}

impl CniConfig {
    /// Real plugins from `path`, the cache under `cache_dir`.
    pub fn new(path: Vec<PathBuf>, cache: ResultCache) -> Self {
        CniConfig {
            path,
            cache,
            exec: Box::new(RawExec::default()),
            on_plugin_stderr: None,
            on_plugin_ran: None,
        }
    }

    pub fn with_exec(mut self, exec: Box<dyn Exec>) -> Self {
        self.exec = exec;
        self
    }

    fn cni_path(&self) -> String {
        self.path
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(":")
    }

    fn env(&self, command: Command, rt: &RuntimeConf) -> PluginEnv {
        PluginEnv {
            command: command.as_str().to_string(),
            container_id: rt.container_id.clone(),
            netns: rt.netns.clone(),
            ifname: rt.ifname.clone(),
            args: args::join(&rt.args),
            path: self.cni_path(),
        }
    }

    /// Every plugin of the list, found before anything runs.
    pub fn find_all(&self, list: &NetworkConfigList) -> Result<Vec<PathBuf>, CniError> {
        list.require_plugins()?;
        list.plugins
            .iter()
            .map(|p| {
                self.exec
                    .find_in_path(&p.plugin_type, &self.path)
                    .map_err(|e| e.context(format!("network {:?}", list.name)))
            })
            .collect()
    }

    fn validate_attachment(list: &NetworkConfigList, rt: &RuntimeConf) -> Result<(), CniError> {
        validate::container_id(&rt.container_id)?;
        validate::network_name(&list.name)?;
        validate::interface_name(&rt.ifname)
    }

    fn run(
        &self,
        command: Command,
        list: &NetworkConfigList,
        index: usize,
        binary: &Path,
        stdin: &[u8],
        rt: &RuntimeConf,
    ) -> Result<ExecOutput, CniError> {
        let plugin = &list.plugins[index];
        let started = std::time::Instant::now();
        let out = self.exec.exec_plugin(binary, stdin, &self.env(command, rt));
        if let Some(ran) = &self.on_plugin_ran {
            ran(&PluginRun {
                network: &list.name,
                plugin_type: &plugin.plugin_type,
                command,
                took: started.elapsed(),
                succeeded: out.is_ok(),
            });
        }
        let out = out.map_err(|e| {
            e.context(format!(
                "network {}: plugin {} ({} of {}) failed ({})",
                quote::quoted(&list.name),
                quote::quoted(&plugin.plugin_type),
                index + 1,
                list.plugins.len(),
                command.as_str()
            ))
        })?;
        if let Some(log) = &self.on_plugin_stderr
            && !out.stderr.is_empty()
        {
            log(&PluginLog {
                plugin_type: plugin.plugin_type.clone(),
                command,
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            });
        }
        Ok(out)
    }

    /// ADD (spec §3 "Adding an attachment"): every plugin in order, each given the previous
    /// one's result; the first failure stops and is returned. The final result is cached and
    /// returned in the list's version.
    pub fn add_network_list(
        &self,
        list: &NetworkConfigList,
        rt: &RuntimeConf,
    ) -> Result<CniResult, CniError> {
        let prepared = self.prepare_add(list, rt)?;
        self.add_prepared(list, rt, prepared).map_err(|e| e.error)
    }

    /// The checks ADD makes before running anything: the request, and every plugin of the
    /// list found. An error here means no plugin of the list ran, so there is nothing of it to
    /// undo: unlike libcni, a bad request has no side effects.
    pub fn prepare_add(
        &self,
        list: &NetworkConfigList,
        rt: &RuntimeConf,
    ) -> Result<PreparedAdd, CniError> {
        Self::validate_attachment(list, rt)?;
        Ok(PreparedAdd {
            binaries: self.find_all(list)?,
        })
    }

    /// ADD of a list that [`CniConfig::prepare_add`] accepted (the same list and request). A
    /// failure says how many plugins had been started ([`AddError`]), for the caller's rollback.
    pub fn add_prepared(
        &self,
        list: &NetworkConfigList,
        rt: &RuntimeConf,
        prepared: PreparedAdd,
    ) -> Result<CniResult, AddError> {
        let binaries = prepared.binaries;
        if binaries.len() != list.plugins.len() {
            return Err(AddError {
                error: CniError::new(
                    ErrorCode::Internal,
                    format!("network {:?}: prepared for another list", list.name),
                ),
                started: 0,
            });
        }
        let n = list.plugins.len();
        let mut prev: Option<CniResult> = None;
        for (i, bin) in binaries.iter().enumerate() {
            // Plugin i is started by `run` unless its exec fails; from then on every failure
            // comes after it started.
            let before_start = |error: CniError| AddError { error, started: i };
            let after_start = |error: CniError| AddError {
                error,
                started: i + 1,
            };
            let stdin = request::build(
                &list.name,
                list.cni_version,
                &list.plugins[i],
                Extra::Attachment {
                    capability_args: &rt.capability_args,
                    prev_result: prev.as_ref(),
                },
            )
            .map_err(before_start)?;
            let out = self
                .run(Command::Add, list, i, bin, &stdin, rt)
                .map_err(|e| {
                    if e.not_started() {
                        before_start(e)
                    } else {
                        after_start(e)
                    }
                })?;
            if let Some(e) = error_printed_as_result(&out.stdout) {
                return Err(after_start(e.context(format!(
                    "network {}: plugin {} ({} of {}) printed an error with exit status 0 (ADD)",
                    quote::quoted(&list.name),
                    quote::quoted(&list.plugins[i].plugin_type),
                    i + 1,
                    list.plugins.len()
                ))));
            }
            // In the list's version before it is passed on as `prevResult` (spec §3 wants it in
            // that version; libcni passes whatever the plugin printed).
            let result = CniResult::parse(&out.stdout, list.cni_version)
                .and_then(|r| r.convert_to(list.cni_version))
                .map_err(|e| {
                    after_start(e.context(format!(
                        "network {}: plugin {} returned an unusable result",
                        quote::quoted(&list.name),
                        quote::quoted(&list.plugins[i].plugin_type)
                    )))
                })?;
            prev = Some(result);
        }
        let every_plugin = |error: CniError| AddError { error, started: n };
        let result = prev.expect("require_plugins: at least one plugin ran");
        let value = result.to_value().map_err(every_plugin)?;
        self.cache
            .write(&CachedAttachment {
                container_id: rt.container_id.clone(),
                config: list.bytes.clone(),
                if_name: rt.ifname.clone(),
                network_name: list.name.clone(),
                netns: rt.netns.clone(),
                cni_args: rt.args.clone(),
                capability_args: rt.capability_args.clone(),
                result: Some(value),
            })
            .map_err(every_plugin)?;
        Ok(result)
    }

    /// CHECK (spec §3 "Checking an attachment"): refused below 0.4.0, skipped with
    /// `disableCheck`; every plugin in order with the cached result; the first failure stops.
    pub fn check_network_list(
        &self,
        list: &NetworkConfigList,
        rt: &RuntimeConf,
    ) -> Result<(), CniError> {
        if list.cni_version < Version::V0_4_0 {
            return Err(CniError::new(
                ErrorCode::IncompatibleVersion,
                format!(
                    "network {:?}: configuration version {} does not support the CHECK command \
                     (0.4.0 or later needed)",
                    list.name, list.cni_version
                ),
            ));
        }
        if list.disable_check {
            return Ok(());
        }
        Self::validate_attachment(list, rt)?;
        let binaries = self.find_all(list)?;
        let cached = self
            .cache
            .cached_result(&list.name, &rt.container_id, &rt.ifname, list.cni_version)?
            .ok_or_else(|| {
                CniError::new(
                    ErrorCode::Io,
                    format!(
                        "network {:?}: no cached result for container {:?} interface {:?} in {} \
                         (was the attachment added?)",
                        list.name,
                        rt.container_id,
                        rt.ifname,
                        self.cache.results_dir().display()
                    ),
                )
            })?;
        for (i, bin) in binaries.iter().enumerate() {
            let stdin = request::build(
                &list.name,
                list.cni_version,
                &list.plugins[i],
                Extra::Attachment {
                    capability_args: &rt.capability_args,
                    prev_result: Some(&cached),
                },
            )?;
            self.run(Command::Check, list, i, bin, &stdin, rt)?;
        }
        Ok(())
    }

    /// DEL (spec §3 "Deleting an attachment"): every plugin in reverse order with the cached
    /// result (0.4.0+). An unreadable cache entry is dropped and DEL goes on without a
    /// `prevResult`, as libcni does. Keeps going past failures and reports all of them, where
    /// libcni stops at the first: one broken plugin does not keep the IPAM plugin from releasing
    /// the address. The cache entry is removed only when every plugin succeeded, so a retried
    /// DEL still has the `prevResult`.
    pub fn del_network_list(
        &self,
        list: &NetworkConfigList,
        rt: &RuntimeConf,
    ) -> Result<(), CniError> {
        Self::validate_attachment(list, rt)?;
        list.require_plugins()?;
        let cached = if list.cni_version >= Version::V0_4_0 {
            match self.cache.cached_result(
                &list.name,
                &rt.container_id,
                &rt.ifname,
                list.cni_version,
            ) {
                Ok(r) => r,
                Err(_) => {
                    let _ = self.cache.remove(&list.name, &rt.container_id, &rt.ifname);
                    None
                }
            }
        } else {
            None
        };
        let mut errors = ErrorList::default();
        for i in (0..list.plugins.len()).rev() {
            if let Err(e) = self.del_one(list, i, cached.as_ref(), rt) {
                errors.push(e);
            }
        }
        if errors.0.is_empty() {
            self.cache
                .remove(&list.name, &rt.container_id, &rt.ifname)?;
        }
        errors.into_result()
    }

    fn del_one(
        &self,
        list: &NetworkConfigList,
        i: usize,
        cached: Option<&CniResult>,
        rt: &RuntimeConf,
    ) -> Result<(), CniError> {
        let plugin: &PluginConfig = &list.plugins[i];
        let bin = self
            .exec
            .find_in_path(&plugin.plugin_type, &self.path)
            .map_err(|e| e.context(format!("network {:?}", list.name)))?;
        let stdin = request::build(
            &list.name,
            list.cni_version,
            plugin,
            Extra::Attachment {
                capability_args: &rt.capability_args,
                prev_result: cached,
            },
        )?;
        self.run(Command::Del, list, i, &bin, &stdin, rt)
            .map(|_| ())
    }

    /// GC (spec §3 "Garbage-collecting a network", libcni `GCNetworkList`): nothing with
    /// `disableGC`; otherwise a full DEL of every cached attachment of this network that is not
    /// in `valid`, then (1.1.0+) GC to every plugin. Keeps going past errors; reports all.
    pub fn gc_network_list(
        &self,
        list: &NetworkConfigList,
        valid: &[GcAttachment],
    ) -> Result<(), CniError> {
        if list.disable_gc {
            return Ok(());
        }
        let mut errors = ErrorList::default();
        match self.cache.list(None) {
            Ok(cached) => {
                for c in cached.iter().filter(|c| c.network_name == list.name) {
                    let key = GcAttachment {
                        container_id: c.container_id.clone(),
                        ifname: c.if_name.clone(),
                    };
                    if valid.contains(&key) {
                        continue;
                    }
                    let rt = RuntimeConf {
                        container_id: c.container_id.clone(),
                        netns: c.netns.clone(),
                        ifname: c.if_name.clone(),
                        args: c.cni_args.clone(),
                        capability_args: c.capability_args.clone(),
                    };
                    if let Err(e) = self.del_network_list(list, &rt) {
                        errors.push(e.context(format!(
                            "failed to delete stale attachment {} {}",
                            c.container_id, c.if_name
                        )));
                    }
                }
            }
            Err(e) => errors.push(e),
        }
        if list.cni_version >= Version::V1_1_0 {
            let rt = RuntimeConf::default();
            for (i, plugin) in list.plugins.iter().enumerate() {
                let done = self
                    .exec
                    .find_in_path(&plugin.plugin_type, &self.path)
                    .map_err(|e| e.context(format!("network {:?}", list.name)))
                    .and_then(|bin| {
                        let stdin = request::build(
                            &list.name,
                            list.cni_version,
                            plugin,
                            Extra::Gc { valid },
                        )?;
                        self.run(Command::Gc, list, i, &bin, &stdin, &rt)
                    });
                if let Err(e) = done {
                    errors.push(e);
                }
            }
        }
        errors.into_result()
    }

    /// STATUS (spec §2 "STATUS"): nothing before 1.1.0; otherwise every plugin in order, stopping
    /// at the first error so its code (50, 51) reaches the caller unchanged. Every error names
    /// the network.
    pub fn status_network_list(&self, list: &NetworkConfigList) -> Result<(), CniError> {
        if list.cni_version < Version::V1_1_0 {
            return Ok(());
        }
        let binaries = self.find_all(list)?;
        let rt = RuntimeConf::default();
        for (i, bin) in binaries.iter().enumerate() {
            let stdin =
                request::build(&list.name, list.cni_version, &list.plugins[i], Extra::None)?;
            self.run(Command::Status, list, i, bin, &stdin, &rt)?;
        }
        Ok(())
    }

    /// VERSION (spec §2 "VERSION"): the versions a plugin supports. A plugin too old to know
    /// VERSION supports 0.1.0 only (libcni's rule). The dummy values satisfy plugins built on
    /// old skeletons that required them for every command.
    pub fn version_info(&self, plugin_type: &str) -> Result<Vec<Version>, CniError> {
        let bin = self.exec.find_in_path(plugin_type, &self.path)?;
        let env = PluginEnv {
            command: Command::Version.as_str().into(),
            netns: "dummy".into(),
            ifname: "dummy".into(),
            path: "dummy".into(),
            ..PluginEnv::default()
        };
        let stdin = format!(r#"{{"cniVersion":"{}"}}"#, Version::CURRENT);
        match self.exec.exec_plugin(&bin, stdin.as_bytes(), &env) {
            Ok(out) => VersionInfo::decode(&out.stdout),
            Err(e) if e.msg == "unknown CNI_COMMAND: VERSION" => Ok(vec![Version::V0_1_0]),
            Err(e) => Err(e.context(format!("plugin {} (VERSION)", quote::quoted(plugin_type)))),
        }
    }
}

/// The spec's error object where a result was expected: a plugin that printed its error but
/// exited 0. Decoded as a result (as libcni does) it would be an empty one (its keys are not
/// result keys), and the attachment would go on and be cached as if the plugin had succeeded;
/// CNI spec §5 "Error" says the plugin failed. Only an object with a numeric `code` and no
/// result key is taken for an error.
fn error_printed_as_result(stdout: &[u8]) -> Option<CniError> {
    const RESULT_KEYS: [&str; 6] = ["interfaces", "ips", "routes", "dns", "ip4", "ip6"];
    let Ok(Value::Object(m)) = serde_json::from_slice::<Value>(stdout) else {
        return None;
    };
    let code = m.get("code")?.as_u64()?;
    if RESULT_KEYS.iter().any(|k| m.contains_key(*k)) {
        return None;
    }
    let text = |k: &str| m.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let code = u32::try_from(code)
        .ok()
        .filter(|c| *c != 0)
        .unwrap_or(ErrorCode::Internal.code());
    let msg = match text("msg") {
        m if m.is_empty() => "no message".to_string(),
        m => m,
    };
    Some(CniError::new(ErrorCode::from_code(code), msg).with_details(text("details")))
}

#[cfg(test)]
mod tests;
