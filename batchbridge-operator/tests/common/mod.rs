//! What the operator's tests against the test bed's real kube-apiserver share: a client
//! with the checked-in CRDs applied, a namespace of the test's own, and polling helpers.
//! Each test binary uses a part of it.
#![allow(dead_code)]

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use batchbridge_operator::crd::{BatchCluster, BatchJob, crd_file_name, crds};
use batchbridge_testbed::{KubeFacts, kube_facts};
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, ObjectMeta, Patch, PatchParams,
    PostParams,
};
use kube::config::{AuthInfo, KubeConfigOptions, Kubeconfig};
use kube::{Client, Config, Resource};
use serde_json::{Value, json};

pub(crate) mod operator;
pub(crate) mod process;

pub(crate) const FIELD_MANAGER: &str = "batchbridge-crds-test";

/// A client of the test bed's API server, with the CRDs applied from `deploy/crds/` and
/// established, and a fresh namespace.
pub(crate) struct Cluster {
    pub(crate) facts: KubeFacts,
    pub(crate) client: Client,
    pub(crate) namespace: String,
}

impl Cluster {
    pub(crate) async fn new(test: &str) -> Self {
        let facts = kube_facts();
        let kubeconfig = Kubeconfig::read_from(&facts.kubeconfig).unwrap();
        let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .unwrap();
        let client = Client::try_from(config).unwrap();
        apply_crds(&client, &facts).await;

        static SEQUENCE: AtomicU32 = AtomicU32::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let namespace = format!(
            "crds-{test}-{}-{nanos}-{}",
            std::process::id(),
            SEQUENCE.fetch_add(1, Ordering::Relaxed)
        );
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(namespace.clone()),
                ..Default::default()
            },
            ..Default::default()
        };
        namespaces
            .create(&PostParams::default(), &ns)
            .await
            .unwrap();
        Self {
            facts,
            client,
            namespace,
        }
    }

    /// A client that authenticates as a ServiceAccount of this namespace bound (by a
    /// RoleBinding) to exactly the operator's ClusterRole in `deploy/rbac/`, and to its
    /// leader-election Role, with a token from the TokenRequest API: what the operator gets
    /// when deployed to watch one namespace.
    pub(crate) async fn operator_client(&self) -> Client {
        client_of(self.operator_kubeconfig().await).await
    }

    /// The kubeconfig behind [`Cluster::operator_client`], for an operator process.
    pub(crate) async fn operator_kubeconfig(&self) -> Kubeconfig {
        let account = "batchbridge-operator";
        let accounts = Api::<ServiceAccount>::namespaced(self.client.clone(), &self.namespace);
        if accounts.get_opt(account).await.unwrap().is_none() {
            let role: ClusterRole = rbac_file("cluster-role.yaml");
            let role_name = role.metadata.name.clone().unwrap();
            Api::<ClusterRole>::all(self.client.clone())
                .patch(
                    &role_name,
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(&role),
                )
                .await
                .unwrap();
            let election: Role = rbac_file("leader-election-role.yaml");
            let election_name = election.metadata.name.clone().unwrap();
            Api::<Role>::namespaced(self.client.clone(), &self.namespace)
                .create(&PostParams::default(), &election)
                .await
                .unwrap();
            self.create_account(account).await;
            self.bind(account, account, "ClusterRole", &role_name).await;
            let election_binding = "batchbridge-operator-leader-election";
            self.bind(election_binding, account, "Role", &election_name)
                .await;
        }
        self.token_kubeconfig(account).await
    }

    /// A kubeconfig for the test bed's API server that authenticates as ServiceAccount
    /// `account` of this namespace, with a token from the TokenRequest API.
    pub(crate) async fn token_kubeconfig(&self, account: &str) -> Kubeconfig {
        let accounts = Api::<ServiceAccount>::namespaced(self.client.clone(), &self.namespace);
        let request: TokenRequest =
            serde_json::from_value(json!({"spec": {"audiences": [], "expirationSeconds": 3600}}))
                .unwrap();
        let token: TokenRequest = accounts
            .create_subresource("token", account, &PostParams::default(), &request)
            .await
            .unwrap();
        let token = token.status.unwrap().token;
        let mut kubeconfig = Kubeconfig::read_from(&self.facts.kubeconfig).unwrap();
        for named in &mut kubeconfig.auth_infos {
            named.auth_info = Some(AuthInfo {
                token: Some(token.clone().into()),
                ..AuthInfo::default()
            });
        }
        kubeconfig
    }

    /// A client of a tenant of this namespace ([`Cluster::tenant_kubeconfig`]).
    pub(crate) async fn tenant_client(&self) -> Client {
        client_of(self.tenant_kubeconfig().await).await
    }

    /// The kubeconfig of a tenant of this namespace: ServiceAccount `tenant`, bound by a
    /// RoleBinding here to the ClusterRole `batchbridge-edit` of `deploy/rbac/` and to
    /// nothing else.
    pub(crate) async fn tenant_kubeconfig(&self) -> Kubeconfig {
        self.kubeconfig_bound_to("tenant", "batchbridge-edit").await
    }

    /// The kubeconfig of ServiceAccount `account` of this namespace, made and bound by a
    /// RoleBinding here to ClusterRole `role` only, after the tenants' roles of
    /// `deploy/rbac/tenant-roles.yaml` are applied.
    pub(crate) async fn kubeconfig_bound_to(&self, account: &str, role: &str) -> Kubeconfig {
        for tenant_role in serde_saphyr::from_multiple::<ClusterRole>(
            &std::fs::read_to_string(rbac_dir().join("tenant-roles.yaml")).unwrap(),
        )
        .unwrap()
        {
            Api::<ClusterRole>::all(self.client.clone())
                .patch(
                    &tenant_role.metadata.name.clone().unwrap(),
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(&tenant_role),
                )
                .await
                .unwrap();
        }
        self.create_account(account).await;
        self.bind(&format!("{account}-{role}"), account, "ClusterRole", role)
            .await;
        self.token_kubeconfig(account).await
    }

    async fn create_account(&self, account: &str) {
        let sa: ServiceAccount =
            serde_json::from_value(json!({"metadata": {"name": account}})).unwrap();
        Api::<ServiceAccount>::namespaced(self.client.clone(), &self.namespace)
            .create(&PostParams::default(), &sa)
            .await
            .unwrap();
    }

    /// RoleBinding `name` in this namespace: `role` (of `kind` Role or ClusterRole) to
    /// ServiceAccount `account` of this namespace.
    async fn bind(&self, name: &str, account: &str, kind: &str, role: &str) {
        let binding: RoleBinding = serde_json::from_value(json!({
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": self.namespace}],
        }))
        .unwrap();
        Api::<RoleBinding>::namespaced(self.client.clone(), &self.namespace)
            .create(&PostParams::default(), &binding)
            .await
            .unwrap();
    }

    pub(crate) fn jobs(&self) -> Api<BatchJob> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    pub(crate) fn clusters(&self) -> Api<BatchCluster> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// An untyped API for `K`, to send objects the Rust types cannot even express.
    pub(crate) fn dynamic<K: Resource<DynamicType = ()>>(&self) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.client.clone(),
            &self.namespace,
            &ApiResource::erase::<K>(&()),
        )
    }

    /// Creates `object` (a `K` as JSON) and returns the API server's refusal, which must be
    /// a 422 Invalid.
    pub(crate) async fn refusal<K: Resource<DynamicType = ()>>(
        &self,
        name: &str,
        spec: Value,
    ) -> String {
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": K::api_version(&()),
            "kind": K::kind(&()),
            "metadata": {"name": name},
            "spec": spec,
        }))
        .unwrap();
        let result = self
            .dynamic::<K>()
            .create(&PostParams::default(), &object)
            .await;
        api_error(result, 422)
    }

    /// Runs the test bed's kubectl with `args` and returns its stdout, panicking unless it
    /// succeeds.
    pub(crate) fn kubectl(&self, args: &[&str]) -> String {
        let output = Command::new(&self.facts.kubectl)
            .arg("--kubeconfig")
            .arg(&self.facts.kubeconfig)
            .args(args)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap()
    }

    /// Deletes what the test made; the namespace itself stays Terminating (no controller).
    pub(crate) async fn clean_up(self) {
        let params = DeleteParams::default();
        let list = ListParams::default();
        self.jobs().delete_collection(&params, &list).await.unwrap();
        self.clusters()
            .delete_collection(&params, &list)
            .await
            .unwrap();
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        namespaces.delete(&self.namespace, &params).await.unwrap();
    }
}

/// A client authenticating as `kubeconfig` says.
pub(crate) async fn client_of(kubeconfig: Kubeconfig) -> Client {
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    Client::try_from(config).unwrap()
}

/// The API server's answer in `result`, which must be an error with HTTP status `code`.
pub(crate) fn api_error<T: std::fmt::Debug>(result: kube::Result<T>, code: u16) -> String {
    match result {
        Err(kube::Error::Api(status)) if status.code == code => status.message,
        other => panic!("expected an API error {code}, got {other:?}"),
    }
}

fn rbac_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/rbac")
}

/// An object from `deploy/rbac/`.
fn rbac_file<T: serde::de::DeserializeOwned>(name: &str) -> T {
    serde_saphyr::from_str(&std::fs::read_to_string(rbac_dir().join(name)).unwrap()).unwrap()
}

pub(crate) fn crd_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/crds")
}

/// Applies the checked-in CRD files with server-side apply and waits until the API server
/// serves them. Concurrent tests apply the same content under the same manager, which is
/// idempotent.
pub(crate) async fn apply_crds(client: &Client, facts: &KubeFacts) {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let params = PatchParams::apply(FIELD_MANAGER).force();
    for generated in crds() {
        let path = crd_dir().join(crd_file_name(&generated));
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|err| panic!("{}: {err}", path.display()));
        let crd: CustomResourceDefinition = serde_saphyr::from_str(&text).unwrap();
        let name = crd.metadata.name.clone().unwrap();
        api.patch(&name, &params, &Patch::Apply(&crd))
            .await
            .unwrap_or_else(|err| {
                panic!(
                    "applying {name} to {}: {err}; is the test bed up (tests/testbed/up.sh)?",
                    facts.server
                )
            });
    }
    for crd in crds() {
        let name = crd.metadata.name.unwrap();
        eventually(&format!("{name} to be Established"), || async {
            let crd = api.get(&name).await.unwrap();
            crd.status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        })
        .await;
    }
}

/// Polls `check` until it holds, panicking after 60 s.
pub(crate) async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(60);
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
