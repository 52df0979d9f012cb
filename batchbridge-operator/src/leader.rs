//! Leader election on a `coordination.k8s.io` Lease, so that of several replicas exactly
//! one runs the controllers.
//!
//! The Lease is taken and renewed by `kube-lease-manager` with server-side apply, so two
//! replicas cannot both hold it. The holder renews it `grace` before it expires; when it
//! stops renewing (it crashed or lost the API server), another replica takes the Lease once
//! it has expired. A replica that shuts down releases it; a standby takes it when it next
//! looks, at the latest when the Lease would have expired.
//!
//! Even a replica that still believes it leads after losing the Lease (cut off from the API
//! server, say) cannot create a second copy of a job: every submit carries the attempt's
//! idempotency key, and the backends answer a known key with the job they already have.

use std::time::Duration;

use kube::Client;
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder};

/// Where and how the replicas elect a leader.
///
/// ```
/// use std::time::Duration;
/// use batchbridge_operator::leader::LeaderElection;
///
/// let election = LeaderElection::new("batchbridge-system", "operator-7d9f-x2x")
///     .lease_duration(Duration::from_secs(30));
/// assert_eq!(election.lease_name, "batchbridge-operator");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderElection {
    /// The namespace of the Lease: the operator's own.
    pub namespace: String,
    /// The Lease's name, the same for every replica.
    pub lease_name: String,
    /// This replica's name in the Lease (`holderIdentity`): its pod's name.
    pub identity: String,
    /// How long the Lease holds after its last renewal.
    pub duration: Duration,
    /// How long before it expires the holder renews it.
    pub grace: Duration,
}

impl LeaderElection {
    /// Election on the Lease `batchbridge-operator` of `namespace`, as `identity`; the Lease
    /// lasts 15 s and is renewed every 10 s.
    pub fn new(namespace: impl Into<String>, identity: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            lease_name: "batchbridge-operator".into(),
            identity: identity.into(),
            duration: Duration::from_secs(15),
            grace: Duration::from_secs(5),
        }
    }

    /// Uses the Lease `name`.
    pub fn lease_name(mut self, name: impl Into<String>) -> Self {
        self.lease_name = name.into();
        self
    }

    /// The Lease lasts `duration` after each renewal, which comes a third of it before the
    /// end: after a crash, another replica leads within `duration`.
    pub fn lease_duration(mut self, duration: Duration) -> Self {
        let seconds = duration.as_secs().max(2);
        self.duration = Duration::from_secs(seconds);
        self.grace = Duration::from_secs((seconds / 3).max(1));
        self
    }

    /// Connects to the Lease, creating it if it does not exist yet.
    pub(crate) async fn manager(&self, client: Client) -> kube_lease_manager::Result<LeaseManager> {
        LeaseManagerBuilder::new(client, &self.lease_name)
            .with_namespace(&self.namespace)
            .with_identity(&self.identity)
            .with_duration(self.duration.as_secs())
            .with_grace(self.grace.as_secs())
            .build()
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_renewal_comes_well_before_the_lease_ends() {
        let cases = [(15, 15, 5), (30, 30, 10), (3, 3, 1), (1, 2, 1), (0, 2, 1)];
        for (asked, duration, grace) in cases {
            let election =
                LeaderElection::new("ns", "me").lease_duration(Duration::from_secs(asked));
            assert_eq!(
                (election.duration.as_secs(), election.grace.as_secs()),
                (duration, grace),
                "asked {asked} s"
            );
            // kube-lease-manager panics unless 0 < grace < duration.
            assert!(election.grace > Duration::ZERO && election.grace < election.duration);
        }
        let default = LeaderElection::new("ns", "me");
        assert_eq!(
            (default.duration.as_secs(), default.grace.as_secs()),
            (15, 5)
        );
    }
}
