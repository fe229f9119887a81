//! Desktop notifications (D-Bus, `org.freedesktop.Notifications`) that can never delay a decision.
//!
//! notify-rust's zbus backend waits forever when a notification server hangs, and a decision must
//! never wait on a desktop. So [`Notifier::notify`] only hands the note to a worker thread through a
//! bounded queue and returns at once. A worker stuck in a call for longer than the timeout is
//! abandoned and replaced; after a few abandoned workers notifications are switched off and the
//! reason kept for `cmdgate status`. No session bus at all is logged once, not per note.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One notification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    pub summary: String,
    pub body: String,
    /// Shown until dismissed (breaker trips, pending approvals) instead of timing out.
    pub urgent: bool,
}

/// What happened to a note: either way the caller goes on at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sent {
    Queued,
    Dropped(&'static str),
}

/// Tunables.
#[derive(Debug, Clone)]
pub struct NotifyConfig {
    /// Off in tests and headless servers that want no desktop.
    pub enabled: bool,
    /// How long one D-Bus call may take before its worker is abandoned.
    pub timeout: Duration,
    /// Notes waiting for the worker; more are dropped (a flood is not worth memory).
    pub queue: usize,
    /// Workers abandoned before notifications are switched off.
    pub max_abandoned: u32,
}

impl Default for NotifyConfig {
    fn default() -> Self {
        NotifyConfig {
            enabled: true,
            timeout: Duration::from_secs(2),
            queue: 32,
            max_abandoned: 4,
        }
    }
}

/// The daemon's notifier. Cheap to share (`Arc`); `notify` never blocks.
pub struct Notifier {
    config: NotifyConfig,
    worker: Mutex<Option<Worker>>,
    abandoned: AtomicU64,
    /// Why notifications are not arriving, for `cmdgate status` (first error only).
    last_error: Arc<Mutex<Option<String>>>,
    logged: Arc<AtomicBool>,
    /// Notes the worker completed (a server accepted them).
    delivered: Arc<AtomicU64>,
    epoch: Instant,
}

struct Worker {
    tx: SyncSender<Note>,
    /// Milliseconds since `epoch` when the current call started; 0 when idle.
    busy_since: Arc<AtomicU64>,
}

impl Notifier {
    pub fn new(config: NotifyConfig) -> Arc<Notifier> {
        Arc::new(Notifier {
            config,
            worker: Mutex::new(None),
            abandoned: AtomicU64::new(0),
            last_error: Arc::new(Mutex::new(None)),
            logged: Arc::new(AtomicBool::new(false)),
            delivered: Arc::new(AtomicU64::new(0)),
            epoch: Instant::now(),
        })
    }

    /// Hands `note` to the worker and returns at once.
    pub fn notify(&self, note: Note) -> Sent {
        if !self.config.enabled {
            return Sent::Dropped("notifications are disabled");
        }
        let Ok(mut slot) = self.worker.lock() else {
            return Sent::Dropped("notifier lock poisoned");
        };
        if let Some(w) = slot.as_ref() {
            let since = w.busy_since.load(Ordering::Acquire);
            if since != 0
                && self.now_ms().saturating_sub(since) > self.config.timeout.as_millis() as u64
            {
                // Stuck in a D-Bus call: leave it behind (it exits when its call returns, because its
                // queue's sender is dropped here) and start afresh.
                *slot = None;
                let n = self.abandoned.fetch_add(1, Ordering::AcqRel) + 1;
                self.record_error(format!(
                    "notification server did not answer within {:?}",
                    self.config.timeout
                ));
                if n >= u64::from(self.config.max_abandoned) {
                    self.record_error(format!(
                        "notification server hung {n} times; notifications switched off"
                    ));
                }
            }
        }
        if self.abandoned.load(Ordering::Acquire) >= u64::from(self.config.max_abandoned) {
            return Sent::Dropped("notification server keeps hanging; notifications switched off");
        }
        let worker = slot.get_or_insert_with(|| self.spawn());
        match worker.tx.try_send(note) {
            Ok(()) => Sent::Queued,
            Err(TrySendError::Full(_)) => Sent::Dropped("notification queue full"),
            Err(TrySendError::Disconnected(_)) => {
                *slot = None;
                Sent::Dropped("notification worker exited")
            }
        }
    }

    /// Notes a server accepted so far.
    pub fn delivered(&self) -> u64 {
        self.delivered.load(Ordering::Acquire)
    }

    /// The first problem seen, if any.
    pub fn last_error(&self) -> Option<String> {
        self.last_error.lock().ok().and_then(|e| e.clone())
    }

    fn now_ms(&self) -> u64 {
        // +1 so that 0 always means idle.
        self.epoch.elapsed().as_millis() as u64 + 1
    }

    fn record_error(&self, e: String) {
        record(&self.last_error, &self.logged, e);
    }

    fn spawn(&self) -> Worker {
        let (tx, rx) = mpsc::sync_channel::<Note>(self.config.queue.max(1));
        let busy_since = Arc::new(AtomicU64::new(0));
        let busy = busy_since.clone();
        let last_error = self.last_error.clone();
        let logged = self.logged.clone();
        let delivered = self.delivered.clone();
        let epoch = self.epoch;
        let spawned = std::thread::Builder::new()
            .name("cmdgate-notify".into())
            .spawn(move || {
                while let Ok(note) = rx.recv() {
                    busy.store(epoch.elapsed().as_millis() as u64 + 1, Ordering::Release);
                    let mut n = notify_rust::Notification::new();
                    n.appname("cmdgate").summary(&note.summary).body(&note.body);
                    if note.urgent {
                        n.urgency(notify_rust::Urgency::Critical)
                            .timeout(notify_rust::Timeout::Never);
                    }
                    match n.show() {
                        Ok(_) => {
                            delivered.fetch_add(1, Ordering::AcqRel);
                        }
                        Err(e) => record(
                            &last_error,
                            &logged,
                            format!("desktop notification failed: {e}"),
                        ),
                    }
                    busy.store(0, Ordering::Release);
                }
            });
        if let Err(e) = spawned {
            self.record_error(format!("cannot start the notification thread: {e}"));
        }
        Worker { tx, busy_since }
    }
}

/// Keeps the first error and logs it once: a missing session bus is a fact of headless machines,
/// not news on every decision.
fn record(last_error: &Mutex<Option<String>>, logged: &AtomicBool, e: String) {
    if let Ok(mut slot) = last_error.lock() {
        slot.get_or_insert(e.clone());
    }
    if !logged.swap(true, Ordering::AcqRel) {
        eprintln!("cmdgate: {e} (further notification errors are not logged)");
    }
}
