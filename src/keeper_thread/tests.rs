use super::*;

/// The thread's ids, as listed by the operating system (Linux).
fn keeper_threads() -> usize {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.trim_end() == THREAD_NAME)
        .count()
}

#[test]
fn runs_tasks_and_ends_when_the_last_runner_is_dropped() {
    let before = keeper_threads();
    let keeper_runtime = KeeperRuntime::thread().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    assert!(keeper_runtime.spawn(async move {
        tx.send(std::thread::current().name().map(str::to_owned))
            .unwrap();
    }));
    let name = rx.recv_timeout(std::time::Duration::from_secs(5)).unwrap();
    assert_eq!(name.as_deref(), Some(THREAD_NAME));
    if cfg!(target_os = "linux") {
        assert_eq!(keeper_threads(), before + 1);
    }
    // A task on the thread that outlives the last `KeeperRuntime` is cancelled with its
    // runtime.
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    keeper_runtime.spawn(async move {
        let _keep = done_tx;
        std::future::pending::<()>().await;
    });
    drop(keeper_runtime);
    // The pending task's sender is dropped with the runtime: the thread has stopped.
    assert!(matches!(
        done_rx.recv_timeout(std::time::Duration::from_secs(5)),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected)
    ));
}

#[test]
fn the_caller_runner_needs_a_runtime() {
    assert!(!KeeperRuntime::Caller.spawn(async {}));
    assert!(KeeperRuntime::Caller.runtime(None).is_none());
}
