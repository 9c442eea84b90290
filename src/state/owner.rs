//! Who this process is, in a form other processes can check: `PID:START` (the start time
//! from /proc tells a live process from a later one that got the same PID) and the host: its
//! name, boot and PID namespace, so that a process asks /proc about a recorded PID only when
//! that PID is one of its own host's.

/// `PID:START` of the process `pid`, if it runs.
pub fn owner_tag(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // the command name (field 2) may hold spaces: count fields after its closing parenthesis
    let after = stat.rsplit_once(')')?.1;
    let start = after.split_whitespace().nth(19)?;
    Some(format!("{pid}:{start}"))
}

/// Whether the process that wrote `owner` (`PID:START…`) still runs on this host.
pub fn owner_alive(owner: &str) -> bool {
    let mut parts = owner.split(':');
    let (Some(pid), Some(start)) = (parts.next(), parts.next()) else {
        return false;
    };
    let Ok(pid) = pid.parse::<u32>() else {
        return false;
    };
    owner_tag(pid).as_deref() == Some(&format!("{pid}:{start}"))
}

/// This host as the state records it: `NAME~BOOT~PIDNS`, the host name, the first 8
/// characters of this boot's id (`/proc/sys/kernel/random/boot_id`) and the inode of this
/// process's PID namespace (`/proc/self/ns/pid`). Two processes with the same id can ask
/// /proc about each other's PIDs; containers that share a host name but not their PIDs, or
/// two machines of one name, have different ids, so one never judges the other's live
/// worker dead because a PID of the same number is not its.
pub fn host_id() -> String {
    static ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ID.get_or_init(|| {
        let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .map(|s| s.trim().chars().filter(|c| *c != '-').take(8).collect())
            .unwrap_or_else(|_| "noboot".to_string());
        let ns = std::fs::read_link("/proc/self/ns/pid")
            .ok()
            .and_then(|p| {
                let s = p.to_string_lossy().to_string();
                let inode = s.strip_prefix("pid:[")?.strip_suffix(']')?.to_string();
                Some(inode)
            })
            .unwrap_or_else(|| "nons".to_string());
        format!("{}~{boot}~{ns}", host_name())
    })
    .clone()
}

/// Whether a recorded host is `mine` (a [`host_id`]): the same id, or a plain host name
/// recorded by an earlier slate (before hosts had boots and namespaces) equal to mine's name.
pub fn same_host(recorded: &str, mine: &str) -> bool {
    recorded == mine || (!recorded.contains('~') && recorded == host_label(mine))
}

/// The host name part of a recorded host (what messages show).
pub fn host_label(host: &str) -> &str {
    host.split('~').next().unwrap_or(host)
}

/// This machine's name (`/proc/sys/kernel/hostname`, else `HOSTNAME`, else "localhost").
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| "localhost".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_a_made_up_one_is_not() {
        let me = owner_tag(std::process::id()).expect("our own /proc entry");
        assert!(owner_alive(&me));
        assert!(owner_alive(&format!("{me}:extra:fields")));
        let (pid, _) = me.split_once(':').expect("PID:START");
        assert!(!owner_alive(&format!("{pid}:1")), "same PID, other start");
        assert!(!owner_alive("nonsense"));
        assert!(!host_name().is_empty());
    }

    #[test]
    fn the_host_id_names_the_host_its_boot_and_its_pid_namespace() {
        let id = host_id();
        let parts: Vec<&str> = id.split('~').collect();
        assert_eq!(parts.len(), 3, "{id}");
        assert_eq!(parts[0], host_name());
        assert_eq!(parts[1].len(), 8, "{id}");
        assert!(parts[2].parse::<u64>().is_ok(), "{id}");
        assert_eq!(host_label(&id), host_name());
        assert_eq!(host_label("plain"), "plain");
        // (recorded, mine) → same host
        let cases = [
            ("n~b~1", "n~b~1", true),
            ("n~b~2", "n~b~1", false), // another PID namespace
            ("n~c~1", "n~b~1", false), // another boot, or a machine of the same name
            ("m~b~1", "n~b~1", false),
            ("n", "n~b~1", true), // written by an earlier slate on this host
            ("m", "n~b~1", false),
        ];
        for (recorded, mine, want) in cases {
            assert_eq!(same_host(recorded, mine), want, "{recorded} vs {mine}");
        }
    }
}
