//! The test bed's Kerberos realm (`tests/testbed/kdc.sh`): a KDC with short ticket lifetimes
//! and a login sshd that accepts only GSSAPI.

use std::path::PathBuf;
use std::time::Duration;

use batchbridge_core::shell::{HostKeys, KerberosKeytab, Keytab, SshAuth, SshConfig};

use crate::{Facts, fail_fast};

/// What `kdc/facts.json` says.
#[derive(Debug, Clone)]
pub struct KdcFacts {
    /// The realm, e.g. `BATCHBRIDGE.TEST`.
    pub realm: String,
    /// The realm's krb5.conf (clients need it as `KRB5_CONFIG`; /etc/krb5.conf is not it).
    pub krb5_conf: PathBuf,
    /// The principal of the login user, `batch@REALM`.
    pub user_principal: String,
    /// That principal's keytab.
    pub user_keytab: PathBuf,
    /// The host name the login sshd is reached by (its host principal's name).
    pub host: String,
    /// The login sshd's port.
    pub port: u16,
    /// The user it lets in.
    pub user: String,
    /// known_hosts holding the login sshd's host key.
    pub known_hosts: PathBuf,
    /// The longest a ticket of the realm lives.
    pub max_life: Duration,
}

/// Reads `kdc/facts.json`.
pub fn kdc_facts() -> KdcFacts {
    let facts = Facts::read("kdc/facts.json");
    KdcFacts {
        realm: facts.field("realm"),
        krb5_conf: facts.field("krb5_conf").into(),
        user_principal: facts.field("user_principal"),
        user_keytab: facts.field("user_keytab").into(),
        host: facts.field("host"),
        port: facts.port(),
        user: facts.field("user"),
        known_hosts: facts.field("known_hosts").into(),
        max_life: Duration::from_secs(facts.0["max_life_seconds"].as_u64().unwrap()),
    }
}

impl KdcFacts {
    /// The user's keytab credential, with the realm's krb5.conf.
    pub fn keytab_auth(&self, keytab: Keytab) -> SshAuth {
        SshAuth::Keytab(
            KerberosKeytab::new(&self.user_principal, keytab).krb5_config(&self.krb5_conf),
        )
    }

    /// A config for the Kerberos login with the given credentials, failing fast.
    pub fn config(&self, auth: SshAuth) -> SshConfig {
        let host_keys = HostKeys::File(self.known_hosts.clone());
        fail_fast(&self.host, self.port, &self.user, auth, host_keys)
    }
}
