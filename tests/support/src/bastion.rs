//! The test bed's jump chain (`tests/testbed/bastion.sh`): two bastion sshds in front of
//! the SLURM login, each with its own client key and host key.

use std::path::PathBuf;

use batchbridge_core::shell::{HostKeys, JumpHost, SshAuth};

use crate::Facts;

/// One hop of the chain, as `bastion/facts.json` describes it.
#[derive(Debug, Clone)]
pub struct BastionHop {
    /// Address of the hop's sshd.
    pub host: String,
    /// Its port.
    pub port: u16,
    /// The user it lets through.
    pub user: String,
    /// The private key this hop (and no other) accepts.
    pub key: PathBuf,
    /// known_hosts holding this hop's host key.
    pub known_hosts: PathBuf,
    /// known_hosts holding a different key for this hop.
    pub wrong_known_hosts: PathBuf,
    /// The password this hop also takes, on the hop that takes one.
    pub password: Option<String>,
}

impl BastionHop {
    /// The hop as the library's jump host: its key file and its real host key.
    pub fn jump_host(&self) -> JumpHost {
        JumpHost::new(
            &self.host,
            &self.user,
            SshAuth::KeyFile(self.key.clone()),
            HostKeys::File(self.known_hosts.clone()),
        )
        .port(self.port)
    }
}

/// Reads `bastion/facts.json`: the hops, nearest first. The chain ends at the SLURM login
/// of `ssh/facts.json`.
pub fn bastion_hops() -> Vec<BastionHop> {
    let facts = Facts::read("bastion/facts.json");
    facts.0["hops"]
        .as_array()
        .expect("bastion/facts.json lacks hops")
        .iter()
        .map(|hop| {
            let hop = Facts(hop.clone());
            BastionHop {
                host: hop.field("host"),
                port: hop.port(),
                user: hop.field("user"),
                key: hop.field("key").into(),
                known_hosts: hop.field("known_hosts").into(),
                wrong_known_hosts: hop.field("wrong_known_hosts").into(),
                password: hop.0["password_file"]
                    .as_str()
                    .map(|file| std::fs::read_to_string(file).unwrap()),
            }
        })
        .collect()
}
