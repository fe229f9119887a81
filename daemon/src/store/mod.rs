//! The store: SQLite (bundled, WAL) under the data dir, with versioned migrations, holding the
//! hash-chained `command_audit`, rules, learning records, tier map revisions seen and breaker state.
//!
//! All writes go through one writer thread that owns the write connection and commits in groups:
//! it takes every job queued while the previous commit ran, runs each in its own savepoint (a failing
//! job rolls back alone), commits once, and only then answers each job. A decision is therefore
//! answered only after its audit row is durable. Reads use their own connection (WAL lets them run
//! beside the writer).
//!
//! The one exception is [`Store::write_deferred`], for rows whose durability can be awaited later
//! ([`Store::durable`]) because nothing they permit happens before that: a group of only such jobs
//! is committed without its fsync (`synchronous=NORMAL`: visible to readers at once, consistent
//! after a crash), answered, and then the WAL is `fdatasync`ed by a second thread, `cmdgate-sync`,
//! at a lower priority (nice 10): the sync's own CPU time (ext4's writeback, about half a
//! millisecond here) no longer holds the CPU from the runtime worker woken by the answer
//! (docs/benchmarks.md, "session 17"). One sync covers every group written before it, so syncs
//! asked for meanwhile are coalesced. A failed sync makes [`Store::durable`] fail for those rows,
//! forever; a stop waits for the last sync.

pub mod audit;
pub mod migrations;
pub mod state;

use std::fs::{DirBuilder, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rusqlite::{Connection, OpenFlags};
use tokio::sync::{mpsc, oneshot, watch};

/// The database file name inside the data dir.
pub const DB_FILE: &str = "cmdgate.db";

/// Most jobs committed in one transaction.
const MAX_GROUP: usize = 512;

/// Store failures. Every one of them ends a request in deny.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("failed to prepare the store directory {path}")]
    Dir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the store was written by a newer cmdgate (schema {found}, this build knows {known})")]
    TooNew { found: i64, known: usize },
    #[error("store content is corrupt: {0}")]
    Corrupt(String),
    #[error("the commit failed: {0}")]
    Commit(String),
    #[error("cannot start the store writer thread")]
    WriterStart(#[source] std::io::Error),
    #[error("cannot encode {what} for the store")]
    Encode {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error("the store writer has stopped")]
    WriterGone,
    #[error("the store reader's lock is poisoned (an earlier read panicked)")]
    ReaderPoisoned,
    #[error("a store read did not finish: {0}")]
    ReadAborted(String),
    #[error("audit row {0} is gone")]
    MissingAuditRow(i64),
}

/// Opens (creating if needed, mode 0600 in a 0700 dir) and migrates the database.
pub fn open_db(path: &Path) -> Result<Connection, StoreError> {
    if let Some(dir) = path.parent() {
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|source| StoreError::Dir {
                path: dir.to_path_buf(),
                source,
            })?;
    }
    // Create the file with a tight mode before SQLite does (it would use the umask).
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
        .map_err(|source| StoreError::Dir {
            path: path.to_path_buf(),
            source,
        })?;
    let mut conn = Connection::open(path)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    // FULL: an acknowledged decision survives a power cut too, not only a daemon crash.
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    migrate(&mut conn)?;
    Ok(conn)
}

/// Applies the pending migrations, each in its own transaction with its `user_version` bump.
pub fn migrate(conn: &mut Connection) -> Result<(), StoreError> {
    let current: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    if current > migrations::MIGRATIONS.len() as i64 {
        return Err(StoreError::TooNew {
            found: current,
            known: migrations::MIGRATIONS.len(),
        });
    }
    for (i, sql) in migrations::MIGRATIONS
        .iter()
        .enumerate()
        .skip(current.max(0) as usize)
    {
        let tx = conn.transaction()?;
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", (i + 1) as i64)?;
        tx.commit()?;
    }
    Ok(())
}

/// A read-only connection (for the CLI's offline `audit verify`, and the daemon's readers).
pub fn open_read_only(path: &Path) -> Result<Connection, StoreError> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    Ok(conn)
}

/// A committed group's answer: its sequence number, or why the commit failed.
type Completion = Box<dyn FnOnce(Result<u64, String>) + Send>;

/// A deferred write's place in the WAL: [`Store::durable`] waits until it is on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub struct Durable(u64);

/// What the writer thread has made durable: every group up to `upto`, except those in `failed`
/// (`(after, upto]`: their WAL sync failed, so they may never reach the disk).
#[derive(Debug, Clone, Default)]
struct Synced {
    upto: u64,
    failed: Vec<(u64, u64)>,
}

impl Synced {
    /// Whether `token`'s rows are on disk: `None` while their sync has not ended.
    fn of(&self, token: Durable) -> Option<Result<(), StoreError>> {
        if self
            .failed
            .iter()
            .any(|(after, upto)| token.0 > *after && token.0 <= *upto)
        {
            return Some(Err(StoreError::Commit(
                "the WAL sync after the commit failed: the rows may not be on disk".into(),
            )));
        }
        (self.upto >= token.0).then_some(Ok(()))
    }
}

/// One queued write: run inside a savepoint (then answered after the commit), or failed unrun.
trait Job: Send {
    /// Runs the work; `true` keeps its changes. The completion answers the caller after the commit.
    fn run(self: Box<Self>, conn: &Connection) -> (bool, Completion);
    /// Answers the caller without running (the transaction could not start).
    fn fail(self: Box<Self>, why: String);
}

struct WriteJob<T, F> {
    f: F,
    done: oneshot::Sender<Result<(T, u64), StoreError>>,
}

impl<T, F> Job for WriteJob<T, F>
where
    T: Send + 'static,
    F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
{
    fn run(self: Box<Self>, conn: &Connection) -> (bool, Completion) {
        let WriteJob { f, done } = *self;
        let result = f(conn);
        let ok = result.is_ok();
        let completion: Completion = Box::new(move |commit| {
            let _ = done.send(match commit {
                Ok(seq) => result.map(|r| (r, seq)),
                Err(e) => Err(StoreError::Commit(e)),
            });
        });
        (ok, completion)
    }

    fn fail(self: Box<Self>, why: String) {
        let _ = self.done.send(Err(StoreError::Commit(why)));
    }
}

enum Msg {
    /// A job, and whether its durability may be awaited later (`Store::write_deferred`).
    Job(Box<dyn Job>, bool),
    /// Finish what was queued before this, then stop.
    Stop(oneshot::Sender<()>),
}

/// The store as the daemon uses it: a group-committing writer and a reader. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    tx: mpsc::Sender<Msg>,
    reader: Arc<Mutex<Connection>>,
    path: PathBuf,
    synced: watch::Receiver<Synced>,
}

impl Store {
    /// Opens the database and starts the writer thread.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        Store::open_syncing(path, wal_path(path))
    }

    /// [`Store::open`], syncing `wal` after a deferred group (tests give a path that fails).
    fn open_syncing(path: &Path, wal: PathBuf) -> Result<Store, StoreError> {
        let writer = open_db(path)?;
        let reader = Connection::open(path)?;
        reader.busy_timeout(std::time::Duration::from_secs(5))?;
        let (tx, rx) = mpsc::channel(8192);
        let (synced_tx, synced) = watch::channel(Synced::default());
        std::thread::Builder::new()
            .name("cmdgate-store".into())
            .spawn(move || writer_loop(writer, rx, &wal, &synced_tx))
            .map_err(StoreError::WriterStart)?;
        Ok(Store {
            tx,
            reader: Arc::new(Mutex::new(reader)),
            path: path.to_path_buf(),
            synced,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `f` in the writer's next group; resolves after the group committed.
    pub async fn write<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        self.queue(f, false).await.map(|(t, _)| t)
    }

    /// Like [`Store::write`], but resolves once the group is committed and visible, possibly
    /// before it is on disk: await [`Store::durable`] with the token before anything the rows
    /// permit happens. For a mirrored run's decision row (the run starts only once it is durable)
    /// and a committed run's row (see `engine/redeem.rs`).
    pub async fn write_deferred<T, F>(&self, f: F) -> Result<(T, Durable), StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        self.queue(f, true).await.map(|(t, seq)| (t, Durable(seq)))
    }

    async fn queue<T, F>(&self, f: F, deferred: bool) -> Result<(T, u64), StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let (done, wait) = oneshot::channel::<Result<(T, u64), StoreError>>();
        let job: Box<dyn Job> = Box::new(WriteJob { f, done });
        self.tx
            .send(Msg::Job(job, deferred))
            .await
            .map_err(|_| StoreError::WriterGone)?;
        wait.await.map_err(|_| StoreError::WriterGone)?
    }

    /// Resolves once the rows of a [`Store::write_deferred`] are on disk; an error when their
    /// WAL sync failed (they may never be) or the writer stopped first.
    pub async fn durable(&self, token: Durable) -> Result<(), StoreError> {
        let mut synced = self.synced.clone();
        loop {
            if let Some(done) = synced.borrow_and_update().of(token) {
                return done;
            }
            synced.changed().await.map_err(|_| StoreError::WriterGone)?;
        }
    }

    /// [`Store::durable`] without waiting: `None` while the rows' sync has not ended.
    pub fn is_durable(&self, token: Durable) -> Option<Result<(), StoreError>> {
        self.synced.borrow().of(token)
    }

    /// Appends one audit row; resolves after it is committed.
    pub async fn append(&self, entry: audit::Entry) -> Result<audit::AuditRow, StoreError> {
        self.write(move |conn| audit::append(conn, entry)).await
    }

    /// Runs a read on the reader connection, off the async threads.
    pub async fn read<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let reader = self.reader.clone();
        tokio::task::spawn_blocking(move || {
            let conn = reader.lock().map_err(|_| StoreError::ReaderPoisoned)?;
            f(&conn)
        })
        .await
        .map_err(|e| StoreError::ReadAborted(e.to_string()))?
    }

    /// [`Store::read`] on this thread, for a caller already off the async runtime's workers
    /// (`engine::decide::off_runtime`): one trip for the read and the work around it.
    pub fn read_here<T>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let conn = self.reader.lock().map_err(|_| StoreError::ReaderPoisoned)?;
        f(&conn)
    }

    /// Commits everything queued so far and stops the writer. Later writes fail (and deny).
    pub async fn close(&self) {
        let (done, wait) = oneshot::channel();
        if self.tx.send(Msg::Stop(done)).await.is_ok() {
            let _ = wait.await;
        }
    }
}

/// SQLite's write-ahead log of the database at `db`.
fn wal_path(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_os_string();
    name.push("-wal");
    PathBuf::from(name)
}

fn writer_loop(
    mut conn: Connection,
    mut rx: mpsc::Receiver<Msg>,
    wal: &Path,
    synced: &watch::Sender<Synced>,
) {
    let mut stop: Option<oneshot::Sender<()>> = None;
    let mut seq: u64 = 0;
    std::thread::scope(|scope| {
        // Without the sync thread every group commits with its fsync (FULL).
        let syncer = Syncer::start(scope, wal, synced);
        while stop.is_none() {
            let Some(first) = rx.blocking_recv() else {
                break;
            };
            if !group(
                &mut conn,
                &mut rx,
                first,
                &mut stop,
                &mut seq,
                synced,
                syncer.as_ref(),
            ) {
                break;
            }
        }
        if let Some(syncer) = syncer {
            syncer.finish();
        }
    });
    if let Some(s) = stop {
        let _ = s.send(());
    }
}

/// Takes `first` and every job queued behind it (up to [`MAX_GROUP`]), runs and commits them as
/// one group, and has a group of deferred jobs synced after its answer. `false`: the writer must
/// stop (durable commits could not be restored).
fn group(
    conn: &mut Connection,
    rx: &mut mpsc::Receiver<Msg>,
    first: Msg,
    stop: &mut Option<oneshot::Sender<()>>,
    seq: &mut u64,
    synced: &watch::Sender<Synced>,
    syncer: Option<&Syncer<'_>>,
) -> bool {
    let mut jobs: Vec<Box<dyn Job>> = Vec::new();
    let mut deferred = syncer.is_some();
    match first {
        Msg::Job(j, d) => {
            jobs.push(j);
            deferred &= d;
        }
        Msg::Stop(s) => *stop = Some(s),
    }
    while stop.is_none() && jobs.len() < MAX_GROUP {
        match rx.try_recv() {
            Ok(Msg::Job(j, d)) => {
                jobs.push(j);
                deferred &= d;
            }
            Ok(Msg::Stop(s)) => *stop = Some(s),
            Err(_) => break,
        }
    }
    if jobs.is_empty() {
        return true;
    }
    // Only a group of deferred jobs commits without its fsync; if the switch fails it
    // commits with it (FULL), which is always allowed.
    // The level must switch back and forth group after group:
    // `deferred_groups_commit_at_normal_and_the_rest_at_full_every_time`.
    let deferred = deferred && conn.pragma_update(None, "synchronous", "NORMAL").is_ok();
    *seq += 1;
    let this = *seq;
    let committed = run_group(conn, jobs, this);
    match (deferred, syncer) {
        (true, Some(syncer)) => {
            // Every later group must be durable when answered again: if that cannot be
            // restored, stop (every later write fails, and a failed write is a deny).
            if conn.pragma_update(None, "synchronous", "FULL").is_err() {
                synced.send_modify(|s| s.failed.push((s.upto, this)));
                return false;
            }
            if committed {
                // The group's frames are in the WAL (written, answered): the sync thread
                // puts them on disk, so `durable` rarely waits.
                syncer.ask(this);
            }
        }
        _ if committed => {
            // A FULL commit syncs the WAL, and with it every earlier frame.
            synced.send_modify(|s| s.upto = s.upto.max(this));
        }
        _ => {}
    }
    true
}

/// The thread that `fdatasync`s the WAL after a deferred group, at nice 10; it coalesces the
/// groups asked for while a sync runs (one sync covers every frame written before it).
struct Syncer<'scope> {
    state: Arc<(Mutex<SyncState>, std::sync::Condvar)>,
    thread: std::thread::ScopedJoinHandle<'scope, ()>,
}

#[derive(Default)]
struct SyncState {
    /// The newest group waiting for its sync.
    pending: Option<u64>,
    /// The writer has stopped: sync what is pending, then end.
    done: bool,
}

impl<'scope> Syncer<'scope> {
    /// `None` when the thread cannot start (the writer then commits every group with its
    /// fsync).
    fn start<'env>(
        scope: &'scope std::thread::Scope<'scope, 'env>,
        wal: &'env Path,
        synced: &'env watch::Sender<Synced>,
    ) -> Option<Syncer<'scope>> {
        let state: Arc<(Mutex<SyncState>, std::sync::Condvar)> = Arc::default();
        let theirs = Arc::clone(&state);
        let thread = std::thread::Builder::new()
            .name("cmdgate-sync".into())
            .spawn_scoped(scope, move || sync_loop(&theirs, wal, synced))
            .ok()?;
        Some(Syncer { state, thread })
    }

    /// Have the WAL synced for group `seq` (and every group before it).
    fn ask(&self, seq: u64) {
        let (lock, ready) = &*self.state;
        let mut st = lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        st.pending = Some(st.pending.map_or(seq, |p| p.max(seq)));
        ready.notify_one();
    }

    /// Sync what is pending, then end the thread.
    fn finish(self) {
        {
            let (lock, ready) = &*self.state;
            let mut st = lock
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            st.done = true;
            ready.notify_one();
        }
        let _ = self.thread.join();
    }
}

fn sync_loop(
    state: &(Mutex<SyncState>, std::sync::Condvar),
    wal: &Path,
    synced: &watch::Sender<Synced>,
) {
    // Below the runtime's workers: a worker woken by a deferred group's answer runs first. A
    // failure leaves the thread at the writer's priority, as the sync was before.
    let _ = cmdgate_sandbox::syscall::nice_this_thread(10);
    let (lock, ready) = state;
    // The newest group this thread synced: a failed sync covers every deferred group after it.
    let mut last_ok = 0;
    loop {
        let seq = {
            let mut st = lock
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            loop {
                if let Some(seq) = st.pending.take() {
                    break seq;
                }
                if st.done {
                    return;
                }
                st = ready
                    .wait(st)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
            }
        };
        let result = std::fs::File::open(wal).and_then(|f| f.sync_data());
        synced.send_modify(|s| match result {
            Ok(()) => {
                s.upto = s.upto.max(seq);
                last_ok = seq;
            }
            // Every group since this thread's last good sync may never reach the disk (a
            // failed writeback drops the pages' dirty state), even where a FULL commit came
            // between: never durable, as before this thread.
            Err(_) => s.failed.push((last_ok, seq)),
        });
    }
}

/// Runs and commits one group as transaction `seq`; `true` when the commit succeeded.
fn run_group(conn: &mut Connection, jobs: Vec<Box<dyn Job>>, seq: u64) -> bool {
    let mut tx = match conn.transaction() {
        Ok(tx) => tx,
        Err(e) => {
            for job in jobs {
                job.fail(format!("begin: {e}"));
            }
            return false;
        }
    };
    let mut completions: Vec<Completion> = Vec::with_capacity(jobs.len());
    for job in jobs {
        let sp = match tx.savepoint() {
            Ok(sp) => sp,
            Err(e) => {
                job.fail(format!("savepoint: {e}"));
                continue;
            }
        };
        let (ok, completion) = job.run(&sp);
        if ok {
            if let Err(e) = sp.commit() {
                // The job's work is lost: say so rather than claim success.
                completion(Err(format!("savepoint: {e}")));
                continue;
            }
        }
        completions.push(completion);
    }
    let commit = tx.commit().map(|()| seq).map_err(|e| e.to_string());
    let ok = commit.is_ok();
    for c in completions {
        c(commit.clone());
    }
    ok
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(i: i64) -> audit::Entry {
        audit::Entry {
            at_ms: i,
            kind: audit::Kind::Decision,
            ..audit::Entry::default()
        }
    }

    fn count(store: &Store) -> i64 {
        let conn = store.reader.lock().unwrap();
        conn.query_row("SELECT count(*) FROM command_audit", [], |r| r.get(0))
            .unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_deferred_write_is_visible_at_once_and_durable_after_its_sync() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join(DB_FILE)).unwrap();
        let before = count(&store);
        let (_, token) = store
            .write_deferred(|c| audit::append(c, row(1)))
            .await
            .unwrap();
        assert_eq!(count(&store), before + 1, "committed and visible");
        store.durable(token).await.expect("synced");
        // A later FULL write and a later deferred one are durable too.
        store.append(row(2)).await.unwrap();
        let (_, later) = store
            .write_deferred(|c| audit::append(c, row(3)))
            .await
            .unwrap();
        store.durable(later).await.expect("synced");
        store.durable(token).await.expect("still synced");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_deferred_write_whose_sync_failed_is_never_durable() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join(DB_FILE);
        // The writer syncs a WAL path that does not exist: the sync fails.
        let store = Store::open_syncing(&db, dir.path().join("missing/cmdgate.db-wal")).unwrap();
        let (_, token) = store
            .write_deferred(|c| audit::append(c, row(1)))
            .await
            .unwrap();
        assert!(store.durable(token).await.is_err());
        assert!(matches!(store.is_durable(token), Some(Err(_))));
        // A later FULL commit syncs the WAL, but a failed sync may have dropped the earlier
        // pages: the deferred rows stay not durable.
        store.append(row(2)).await.unwrap();
        assert!(store.durable(token).await.is_err());
        assert!(matches!(store.is_durable(token), Some(Err(_))));
    }

    /// A deferred group runs at `synchronous=NORMAL` and every other at FULL, again and again:
    /// every later group's durability rests on the switch back.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn deferred_groups_commit_at_normal_and_the_rest_at_full_every_time() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join(DB_FILE)).unwrap();
        let level = |c: &Connection| -> Result<i64, StoreError> {
            Ok(c.pragma_query_value(None, "synchronous", |r| r.get(0))?)
        };
        for _ in 0..3 {
            let (normal, _) = store.write_deferred(level).await.unwrap();
            assert_eq!(normal, 1, "a deferred group: NORMAL");
            assert_eq!(store.write(level).await.unwrap(), 2, "any other: FULL");
        }
    }

    /// The WAL's sync runs on its own thread at nice 10, below the runtime's workers (the
    /// answer's wake-up goes first); a close still waits for the last one.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_sync_runs_below_the_workers_and_a_close_waits_for_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join(DB_FILE)).unwrap();
        let (_, first) = store
            .write_deferred(|c| audit::append(c, row(1)))
            .await
            .unwrap();
        store.durable(first).await.expect("synced");
        // This store's sync thread has taken nice 10 before its first sync. Other tests open
        // stores too, and a sync thread just started may not have yet: look for ours among
        // them as "a cmdgate-sync thread at nice 10".
        let mut nices = Vec::new();
        for task in std::fs::read_dir("/proc/self/task").unwrap() {
            let task = task.unwrap().path();
            let comm = std::fs::read_to_string(task.join("comm")).unwrap_or_default();
            if comm.trim_end() != "cmdgate-sync" {
                continue;
            }
            let Ok(stat) = std::fs::read_to_string(task.join("stat")) else {
                continue; // that thread ended meanwhile
            };
            // Fields after the command's closing parenthesis; nice is field 19 of stat(5).
            let rest = &stat[stat.rfind(')').unwrap() + 2..];
            nices.push(rest.split(' ').nth(16).unwrap().parse::<i32>().unwrap());
        }
        assert!(
            nices.contains(&10),
            "cmdgate-sync threads' nice values: {nices:?}"
        );
        let (_, last) = store
            .write_deferred(|c| audit::append(c, row(2)))
            .await
            .unwrap();
        store.close().await;
        assert!(matches!(store.is_durable(last), Some(Ok(()))));
    }

    /// The redemption's trip asks without waiting (`redeem.rs`): a row whose sync has not
    /// ended is not durable yet (the redemption then waits as before), a synced one is.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn without_waiting_a_deferred_write_is_durable_only_once_synced() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join(DB_FILE)).unwrap();
        let (_, token) = store
            .write_deferred(|c| audit::append(c, row(1)))
            .await
            .unwrap();
        // A group the writer has not reached, let alone synced.
        assert!(store.is_durable(Durable(token.0 + 1_000)).is_none());
        store.durable(token).await.expect("synced");
        assert!(matches!(store.is_durable(token), Some(Ok(()))));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_appends_commit_in_groups_and_chain() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join(DB_FILE)).unwrap();
        let mut handles = Vec::new();
        for i in 0..200 {
            let s = store.clone();
            handles.push(tokio::spawn(async move {
                s.append(audit::Entry {
                    at_ms: i,
                    kind: audit::Kind::Decision,
                    ..Default::default()
                })
                .await
                .unwrap()
                .id
            }));
        }
        let mut ids = Vec::new();
        for h in handles {
            ids.push(h.await.unwrap());
        }
        ids.sort();
        assert_eq!(ids, (1..=200).collect::<Vec<_>>());
        let report = store.read(audit::verify).await.unwrap();
        assert!(report.ok());
        assert_eq!(report.rows, 200);
        store.close().await;
        assert!(matches!(
            store.append(audit::Entry::default()).await,
            Err(StoreError::WriterGone)
        ));
    }

    #[tokio::test]
    async fn a_failing_job_rolls_back_alone() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join(DB_FILE)).unwrap();
        let bad = store.write(|c| {
            audit::append(
                c,
                audit::Entry {
                    kind: audit::Kind::Decision,
                    ..Default::default()
                },
            )?;
            Err::<(), _>(StoreError::Corrupt("boom".into()))
        });
        let good = store.append(audit::Entry {
            kind: audit::Kind::Outcome,
            ..Default::default()
        });
        let (bad, good) = tokio::join!(bad, good);
        assert!(bad.is_err());
        assert_eq!(good.unwrap().id, 1);
        assert_eq!(store.read(audit::verify).await.unwrap().rows, 1);
    }

    #[test]
    fn reopening_keeps_the_schema_and_refuses_newer_ones() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(DB_FILE);
        drop(open_db(&path).unwrap());
        let conn = open_db(&path).unwrap();
        conn.pragma_update(None, "user_version", 99).unwrap();
        drop(conn);
        assert!(matches!(
            open_db(&path),
            Err(StoreError::TooNew { found: 99, .. })
        ));
        let mode = std::fs::metadata(&path).unwrap().permissions();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
            0o600
        );
    }
}
