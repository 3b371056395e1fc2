//! The runtime's CNI plugin (`CNI_COMMAND` set): the call forwarded to `plumb daemon` when the
//! configuration names a daemon socket that answers, else run in this process (thin mode)
//! through the engine, with an API client built for the call.

use std::io::{Read, Write};

/// The CNI plugin: the call forwarded to the daemon when the configuration names one that
/// listens, else run here (thin mode). Its exit code.
pub fn run(getenv: &dyn Fn(&str) -> Option<String>) -> i32 {
    let mut stdin = Vec::new();
    if let Err(e) = std::io::stdin().lock().read_to_end(&mut stdin) {
        // As the skeleton reports it.
        let e = cni::CniError::new(
            cni::ErrorCode::Io,
            format!("reading the configuration on stdin: {e}"),
        );
        let _ = writeln!(std::io::stdout(), "{}", e.to_json());
        return 1;
    }
    let mut stdout = std::io::stdout().lock();
    let mut caller = plumb_engine::commands::Caller::ThisProcess;
    if let Some(socket) = crate::shim::daemon_socket(&stdin) {
        let env: std::collections::BTreeMap<String, String> = std::env::vars_os()
            .filter_map(|(k, _)| k.into_string().ok())
            .filter(|k| k.starts_with("CNI_"))
            .filter_map(|k| getenv(&k).map(|v| (k, v)))
            .collect();
        let slow = |line: &str| crate::shim::slow(&env, &stdin, line);
        match crate::shim::forward(&socket, &env, &stdin, &slow) {
            Ok(crate::shim::Forwarded::Answer { stdout: out, code }) => {
                let wrote = stdout.write_all(&out).and_then(|()| stdout.flush());
                return if wrote.is_ok() { code } else { 1 };
            }
            Ok(crate::shim::Forwarded::NoDaemon(why)) => {
                if let Ok(config) = plumb_engine::config::Config::parse(&stdin) {
                    plumb_engine::log::Log::from_config(&config)
                        .verbose(&format!("{why}: running the call in this process"));
                }
            }
            Ok(crate::shim::Forwarded::Unacknowledged(why)) => {
                slow(&format!("{why}: running the call in this process"));
                // A call that daemon is running for the container holds its lock: waited for
                // a while only, not for as long as the daemon stays frozen.
                caller = plumb_engine::commands::Caller::InsteadOfDaemon;
            }
            Err(e) => {
                let mut e = crate::shim::failed(e, &env, &stdin);
                e.cni_version = crate::shim::cni_version(&stdin);
                let _ = writeln!(stdout, "{}", e.to_json());
                return 1;
            }
        }
    }
    let plugin = plumb_engine::commands::Plumb {
        routes: &plumb_engine::routes::NetlinkRoutes,
        connect: &plumb_cluster::connect::PerCall,
        caller,
    };
    cni::skel::dispatch(&plugin, getenv, &mut &stdin[..], &mut stdout)
}
