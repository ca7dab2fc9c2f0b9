//! The run id: names the `records-<run>` file and every summary line of one
//! layer's run.

use std::time::SystemTime;

/// The run id: UTC start time (`YYYYMMDDTHHMMSSZ`) and the process id.
pub(crate) fn run_id() -> String {
    run_id_at(SystemTime::now(), std::process::id())
}

/// The run id of a run started at `at` by process `pid`.
fn run_id_at(at: SystemTime, pid: u32) -> String {
    // RFC 3339 (`2025-12-02T10:20:30Z`) without its separators: sorts the
    // same and stays a plain file-name token.
    let stamp: String = humantime::format_rfc3339_seconds(at)
        .to_string()
        .chars()
        .filter(|c| !matches!(c, '-' | ':'))
        .collect();
    format!("{stamp}-{pid}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn run_ids_are_utc_start_time_and_pid() {
        let at = |secs: u64| UNIX_EPOCH + Duration::from_secs(secs);
        assert_eq!(run_id_at(at(0), 7), "19700101T000000Z-7");
        // 2025-12-02 10:20:30 UTC.
        assert_eq!(
            run_id_at(at(20_424 * 86_400 + 37_230), 4242),
            "20251202T102030Z-4242"
        );
        // A leap day.
        assert_eq!(
            run_id_at(at(11_016 * 86_400 + 86_399), 1),
            "20000229T235959Z-1"
        );
        let now = run_id();
        let (stamp, pid) = now.split_once('-').unwrap_or_default();
        assert_eq!(pid, std::process::id().to_string());
        assert_eq!(stamp.len(), "YYYYMMDDTHHMMSSZ".len(), "{now}");
        assert!(stamp.chars().enumerate().all(|(i, c)| match i {
            8 => c == 'T',
            15 => c == 'Z',
            _ => c.is_ascii_digit(),
        }));
    }
}
