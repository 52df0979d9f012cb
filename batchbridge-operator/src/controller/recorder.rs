//! Publishes Events (`events.k8s.io/v1`) about the operator's objects, folding one that
//! repeats into a series on the first, as kube-runtime's `Recorder` does, while holding
//! only what a series needs, for a bounded number of Events.
//!
//! kube-runtime 5's `Recorder` keeps every Event it published for 6 minutes, each with
//! both its object references, its note and its key: about 3 KiB each, measured. A burst
//! of 10,000 BatchJobs publishes some 20,000 Events (`Submitted`, then how each ended)
//! within those minutes, 59 MiB held, and each publish scans them all. Here an Event that
//! may repeat costs its key and its name, at most [`RECENT`] of them, for [`SERIES_TTL`]
//! after it was last seen; an older or evicted one's repeat is an Event of its own.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::events::EventType;
use kube::{Api, Client};
use serde_json::json;

/// How long after an Event was last seen a repeat still joins its series: kube-runtime's
/// `CACHE_TTL`.
pub const SERIES_TTL: Duration = Duration::from_secs(6 * 60);
/// The most Events remembered for their series at once; beyond, the oldest is forgotten.
pub const RECENT: usize = 4096;

/// Publishes Events as one reporting controller and instance.
///
/// ```no_run
/// use batchbridge_operator::controller::recorder::Recorder;
/// use batchbridge_operator::crd::BatchJob;
/// use kube::{Api, Client};
/// use kube::runtime::events::EventType;
/// use kube::Resource;
///
/// # async fn run() -> Result<(), kube::Error> {
/// let client = Client::try_default().await?;
/// let recorder = Recorder::new(client.clone(), "batchbridge-operator", "operator-0");
/// let job = Api::<BatchJob>::namespaced(client, "team-a").get("analyse").await?;
/// recorder
///     .publish(&job.object_ref(&()), EventType::Normal, "Submitted", "SubmitAttempt1", "job 42")
///     .await?;
/// # Ok(())
/// # }
/// ```
pub struct Recorder {
    client: Client,
    controller: String,
    instance: String,
    recent: Mutex<Recent>,
}

/// What makes an Event about one object a repeat of another: kube-runtime's key less the
/// reporter, which is this recorder's own.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Occurrence {
    warning: bool,
    reason: String,
    action: String,
}

impl Recorder {
    /// A recorder that reports as `controller`, from `instance` (the operator's pod).
    pub fn new(client: Client, controller: &str, instance: &str) -> Self {
        Self {
            client,
            controller: controller.to_owned(),
            instance: instance.to_owned(),
            recent: Mutex::new(Recent::default()),
        }
    }

    /// Publishes an Event about `regarding`. One with the same type, reason and action about
    /// the same object (by uid) seen within [`SERIES_TTL`] counts as a repeat: the first
    /// Event's series is patched (its note stays the first's, as with kube's recorder), and
    /// when that Event is gone (the API server's event TTL) a new one is created.
    ///
    /// # Errors
    ///
    /// The API server's refusal of the create or the patch.
    pub async fn publish(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        action: &str,
        note: &str,
    ) -> Result<(), kube::Error> {
        let namespace = regarding.namespace.as_deref().unwrap_or("default");
        let events: Api<Event> = Api::namespaced(self.client.clone(), namespace);
        let warning = matches!(type_, EventType::Warning);
        let key = regarding.uid.clone().map(|uid| {
            (
                uid,
                Occurrence {
                    warning,
                    reason: reason.to_owned(),
                    action: action.to_owned(),
                },
            )
        });
        let now = Timestamp::now();
        let repeat = key
            .as_ref()
            .and_then(|key| self.recent().repeat(key, Instant::now()));
        if let Some((name, count)) = repeat {
            let series = json!({"series": EventSeries {
                count,
                last_observed_time: MicroTime(now),
            }});
            match events
                .patch(&name, &PatchParams::default(), &Patch::Merge(&series))
                .await
            {
                Err(kube::Error::Api(status)) if status.is_not_found() => {}
                other => return other.map(drop),
            }
        }
        let name = event_name(
            regarding.name.as_deref().unwrap_or(&self.controller),
            now.as_nanosecond(),
        );
        let event = Event {
            action: Some(action.to_owned()),
            reason: Some(reason.to_owned()),
            note: Some(note.to_owned()),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding.clone()),
            metadata: ObjectMeta {
                namespace: Some(namespace.to_owned()),
                name: Some(name.clone()),
                ..ObjectMeta::default()
            },
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            type_: Some(if warning { "Warning" } else { "Normal" }.to_owned()),
            ..Event::default()
        };
        events.create(&PostParams::default(), &event).await?;
        if let Some(key) = key {
            self.recent().first(key, name, Instant::now());
        }
        Ok(())
    }

    fn recent(&self) -> std::sync::MutexGuard<'_, Recent> {
        // A panic while holding it leaves a plain map behind: still usable.
        self.recent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// An Event's name: the object's, then the time in hex, as kube-runtime names them, within
/// the 253 characters a name may have. A BatchJob's name may take all 253, so it is cut to
/// leave room, and its cut end trimmed to a letter or digit (a name ends with one).
fn event_name(object: &str, nanos: i128) -> String {
    let suffix = format!(".{nanos:x}");
    let room = 253usize.saturating_sub(suffix.len());
    let kept = object
        .get(..room.min(object.len()))
        .unwrap_or(object)
        .trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
    format!("{kept}{suffix}")
}

/// The Events that may still get repeats, oldest first.
#[derive(Debug, Default)]
struct Recent {
    series: HashMap<(String, Occurrence), Series>,
    /// Keys in the order their first Event was published; each key once.
    order: VecDeque<(String, Occurrence)>,
}

#[derive(Debug)]
struct Series {
    /// The first Event's name.
    name: String,
    /// Occurrences so far.
    count: i32,
    last_seen: Instant,
}

impl Recent {
    /// `key` seen again at `now`: the name of its first Event and the count to write, or
    /// None when it is not a repeat.
    fn repeat(&mut self, key: &(String, Occurrence), now: Instant) -> Option<(String, i32)> {
        self.forget_old(now);
        let series = self.series.get_mut(key)?;
        if now.duration_since(series.last_seen) > SERIES_TTL {
            return None;
        }
        series.count = series.count.saturating_add(1);
        series.last_seen = now;
        Some((series.name.clone(), series.count))
    }

    /// `key`'s Event was created as `name` at `now`: a later occurrence is its repeat.
    fn first(&mut self, key: (String, Occurrence), name: String, now: Instant) {
        self.forget_old(now);
        let series = Series {
            name,
            count: 1,
            last_seen: now,
        };
        if self.series.insert(key.clone(), series).is_none() {
            self.order.push_back(key);
        }
        while self.order.len() > RECENT {
            self.forget_first();
        }
    }

    /// Forgets, oldest first, the Events not seen for [`SERIES_TTL`]; one still repeating
    /// keeps those behind it until [`RECENT`] pushes them out.
    fn forget_old(&mut self, now: Instant) {
        while let Some(first) = self.order.front()
            && self
                .series
                .get(first)
                .is_none_or(|s| now.duration_since(s.last_seen) > SERIES_TTL)
        {
            self.forget_first();
        }
    }

    fn forget_first(&mut self) {
        if let Some(key) = self.order.pop_front() {
            self.series.remove(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(uid: &str, reason: &str) -> (String, Occurrence) {
        (
            uid.to_owned(),
            Occurrence {
                warning: false,
                reason: reason.to_owned(),
                action: "Reconcile".to_owned(),
            },
        )
    }

    /// Steps: (seconds since the start, key, what publish does: a repeat of the named
    /// Event with the count, or a new Event of that name).
    #[test]
    fn repeats_fold_into_the_first_event_until_it_is_old() {
        enum Does {
            Repeat(&'static str, i32),
            New(&'static str),
        }
        use Does::*;
        let ttl = SERIES_TTL.as_secs();
        let steps: Vec<(u64, (&str, &str), Does)> = vec![
            (0, ("a", "Submitted"), New("a.1")),
            (1, ("a", "Submitted"), Repeat("a.1", 2)),
            (2, ("a", "Succeeded"), New("a.2")),
            // Another object's Event of the same reason is its own.
            (2, ("b", "Submitted"), New("b.1")),
            (ttl, ("a", "Submitted"), Repeat("a.1", 3)),
            // Counted from the last time seen, not the first.
            (2 * ttl, ("a", "Submitted"), Repeat("a.1", 4)),
            // b was last seen at 2 s: forgotten.
            (2 * ttl, ("b", "Submitted"), New("b.2")),
            (3 * ttl + 1, ("a", "Submitted"), New("a.3")),
        ];
        let start = Instant::now();
        let mut recent = Recent::default();
        for (n, (at, (uid, reason), does)) in steps.into_iter().enumerate() {
            let now = start + Duration::from_secs(at);
            let key = key(uid, reason);
            match (recent.repeat(&key, now), does) {
                (Some(got), Repeat(name, count)) => {
                    assert_eq!(got, (name.to_owned(), count), "step {n}");
                }
                (None, New(name)) => recent.first(key, name.to_owned(), now),
                (got, _) => panic!("step {n}: {got:?}"),
            }
        }
        assert_eq!(recent.series.len(), 1, "a.3 is remembered, no more");
    }

    #[test]
    fn event_names_stay_within_253_characters() {
        let nanos = 1_764_000_000_123_456_789_i128;
        assert_eq!(event_name("job", nanos), format!("job.{nanos:x}"));
        let longest = format!("{}.{}", "a".repeat(200), "b".repeat(52));
        let name = event_name(&longest, nanos);
        assert_eq!(name.len(), 253);
        assert!(name.starts_with(&"a".repeat(200)), "{name}");
        // Cut just after a dot: the dot goes too.
        let dotted = format!("{}.{}", "a".repeat(235), "b".repeat(17));
        assert_eq!(
            event_name(&dotted, nanos),
            format!("{}.{nanos:x}", "a".repeat(235))
        );
    }

    #[test]
    fn at_most_recent_events_are_remembered() {
        let now = Instant::now();
        let mut recent = Recent::default();
        for i in 0..RECENT + 10 {
            recent.first(key(&i.to_string(), "Submitted"), format!("e{i}"), now);
        }
        assert_eq!(recent.series.len(), RECENT);
        assert_eq!(recent.order.len(), RECENT);
        assert_eq!(
            recent.repeat(&key("0", "Submitted"), now),
            None,
            "the oldest went"
        );
        assert_eq!(
            recent.repeat(&key(&(RECENT + 9).to_string(), "Submitted"), now),
            Some((format!("e{}", RECENT + 9), 2))
        );
    }
}
