//! Who this process is, in a form other processes can check: `PID:START` (the start time
//! from /proc tells a live process from a later one that got the same PID) and the host name.

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
}
