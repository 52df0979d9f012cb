//! The deployment manifests (issue 6): the Helm chart `deploy/helm/batchbridge-operator` and
//! the kustomize base and single-namespace overlay in `deploy/kustomize/`, rendered with the
//! test bed's helm (`tests/testbed/helm.sh`) and kubectl (`tests/testbed/kube.sh`, kustomize
//! built in), then validated by the test bed's real kube-apiserver with a server-side dry
//! run (`kubectl apply --server-side --dry-run=server`: schemas, unknown fields, RBAC
//! objects, namespaces that must exist). Each rendering is then checked for what a user
//! relies on: the operator's permissions are exactly `deploy/rbac/`'s, all-namespaces mode
//! binds them cluster-wide without WATCH_NAMESPACE, single-namespace mode binds them in the
//! watched namespace only, and the Deployment's security context, probes, resources, /tmp
//! and leader-election settings. The README's "Deploy on Kubernetes" YAML goes through the
//! same dry run against the CRDs.
//!
//! Issue 33: the chart needs `image.repository` (nobody publishes the image); its
//! values.schema.json matches values.yaml key for key and refuses unknown keys and wrong
//! types; its README's table of values is generated from values.yaml's comments; the
//! PodDisruptionBudget, ServiceMonitor and PrometheusRule switches render objects the API
//! server accepts (prometheus-operator's CRDs from deploy/testdata/ installed for that) and
//! alerts `promtool` accepts; and the admission policy, installed for real, refuses every
//! pod from the operator's ServiceAccount that is not the log pod the operator makes.
//!
//! Namespaces are made for real with unique names, and deleted at the end (the API server
//! has no namespace controller, so they stay Terminating; `kube.sh down` clears them). A
//! test bed that is not up fails these tests; they never skip.

// Helpers panic on purpose: a refused manifest or a missing test bed is a failed test.
#![allow(clippy::unwrap_used)]

mod catalog;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use batchbridge_testbed::{HelmFacts, KubeFacts, helm_facts, kube_facts};
use serde_json::{Value, json};

/// The field manager of the dry runs. Conflicts are forced: the test bed's CRDs and the
/// shared ClusterRole are owned by other tests' managers, and a dry run changes nothing.
const FIELD_MANAGER: &str = "batchbridge-deploy-test";
/// The release name the README uses.
const RELEASE: &str = "batchbridge-operator";
/// The user the image runs as (Dockerfile) and the manifests require.
const UID: u64 = 65532;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn chart() -> PathBuf {
    repo().join("deploy/helm/batchbridge-operator")
}

/// The `image.repository` the tests install the chart with: it has no default, as no
/// registry publishes the image.
const CHART_REPOSITORY: &str = "registry.example.com/hpc/batchbridge-operator";

/// The image the chart deploys with [`CHART_REPOSITORY`] and no tag: the chart's appVersion,
/// the operator's version.
fn chart_image() -> String {
    format!("{CHART_REPOSITORY}:{}", env!("CARGO_PKG_VERSION"))
}

/// The image the kustomize base deploys as checked in: what README's kind/minikube command
/// builds and loads.
fn kustomize_image() -> String {
    format!("batchbridge-operator:{}", env!("CARGO_PKG_VERSION"))
}

/// A namespace-safe name, unique per run and call.
fn unique(prefix: &str) -> String {
    static SEQUENCE: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!(
        "{prefix}-{}-{nanos}-{}",
        std::process::id(),
        SEQUENCE.fetch_add(1, Ordering::Relaxed)
    )
}

/// The test bed's helm and kubectl, with helm's own directories in a private place.
struct Tools {
    kube: KubeFacts,
    helm: HelmFacts,
    helm_home: tempfile::TempDir,
}

impl Tools {
    fn new() -> Self {
        Self {
            kube: kube_facts(),
            helm: helm_facts(),
            helm_home: tempfile::tempdir().unwrap(),
        }
    }

    fn helm_command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(&self.helm.helm);
        for (var, dir) in [
            ("HELM_CACHE_HOME", "cache"),
            ("HELM_CONFIG_HOME", "config"),
            ("HELM_DATA_HOME", "data"),
        ] {
            command.env(var, self.helm_home.path().join(dir));
        }
        command.args(args);
        command
    }

    /// helm's stdout; panics unless it succeeds.
    fn helm(&self, args: &[&str]) -> String {
        succeeded(self.helm_command(args), &format!("helm {args:?}"))
    }

    /// helm's stderr; panics if it succeeds.
    fn helm_fails(&self, args: &[&str]) -> String {
        let output = self.helm_command(args).output().unwrap();
        assert!(
            !output.status.success(),
            "helm {args:?} succeeded, expected a refusal:\n{}",
            String::from_utf8_lossy(&output.stdout)
        );
        String::from_utf8_lossy(&output.stderr).into_owned()
    }

    /// kubectl's stdout (admin of the test bed's API server); panics unless it succeeds.
    fn kubectl(&self, args: &[&str]) -> String {
        succeeded(self.kubectl_command(args), &format!("kubectl {args:?}"))
    }

    /// kubectl with the test bed's kubeconfig and `args`.
    fn kubectl_command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(&self.kube.kubectl);
        command
            .arg("--kubeconfig")
            .arg(&self.kube.kubeconfig)
            .args(args);
        command
    }

    /// `kubectl wait` until the CRDs named are Established. A CRD created a moment ago has
    /// no status yet, and kubectl then fails at once ("accessor error: <nil>") instead of
    /// waiting (seen in CI): tried again for that, up to 30 times, a second apart.
    fn wait_established(&self, crds: &[&str]) {
        let mut args = vec!["wait", "--for=condition=Established", "--timeout=60s"];
        args.extend_from_slice(crds);
        for _ in 0..30 {
            let output = self.kubectl_command(&args).output().unwrap();
            if output.status.success() {
                return;
            }
            if !String::from_utf8_lossy(&output.stderr).contains("accessor error") {
                break;
            }
            std::thread::sleep(std::time::Duration::from_secs(1));
        }
        self.kubectl(&args);
    }

    /// `helm template` of the chart in `source` (a directory or packaged chart) into
    /// `namespace`, CRDs included, with `image.repository` [`CHART_REPOSITORY`] unless
    /// `sets` names another (a later `--set` wins).
    fn template(&self, source: &Path, namespace: &str, sets: &[&str]) -> String {
        let repository = format!("image.repository={CHART_REPOSITORY}");
        let mut args = vec![
            "template",
            RELEASE,
            source.to_str().unwrap(),
            "--namespace",
            namespace,
            "--include-crds",
            "--set",
            &repository,
        ];
        for set in sets {
            args.extend(["--set", set]);
        }
        self.helm(&args)
    }

    /// Creates namespaces for real; they are deleted when the guard drops.
    fn namespaces(&self, names: &[&str]) -> DeletedOnDrop<'_> {
        for name in names {
            self.kubectl(&["create", "namespace", name]);
        }
        let mut args = vec!["namespace".to_owned(), "--wait=false".to_owned()];
        args.extend(names.iter().map(|n| (*n).to_owned()));
        DeletedOnDrop { tools: self, args }
    }

    /// The server-side dry run of `yaml`: every object must be accepted. Returns what kubectl
    /// reports, one `resource/name` per object.
    fn dry_run(&self, yaml: &str) -> Vec<String> {
        self.dry_run_in(yaml, &[])
    }

    /// [`Tools::dry_run`] with more kubectl arguments (`-n NAMESPACE`).
    fn dry_run_in(&self, yaml: &str, more: &[&str]) -> Vec<String> {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("manifests.yaml");
        std::fs::write(&file, yaml).unwrap();
        let mut args = vec![
            "apply",
            "--server-side",
            "--dry-run=server",
            "--force-conflicts",
            "--field-manager",
            FIELD_MANAGER,
            "-o",
            "name",
            "-f",
            file.to_str().unwrap(),
        ];
        args.extend_from_slice(more);
        let out = self.kubectl(&args);
        out.lines().map(str::to_owned).collect()
    }
}

/// Objects a test made for real (namespaces, cluster-scoped objects), deleted on drop, also
/// when the test panics: `kubectl delete --ignore-not-found ARGS`.
struct DeletedOnDrop<'a> {
    tools: &'a Tools,
    args: Vec<String>,
}

impl Drop for DeletedOnDrop<'_> {
    fn drop(&mut self) {
        let mut command = Command::new(&self.tools.kube.kubectl);
        command
            .arg("--kubeconfig")
            .arg(&self.tools.kube.kubeconfig)
            .args(["delete", "--ignore-not-found"])
            .args(&self.args);
        let output = command.output().unwrap();
        if !output.status.success() && !std::thread::panicking() {
            panic!(
                "deleting {:?}: {}",
                self.args,
                String::from_utf8_lossy(&output.stderr)
            );
        }
    }
}

fn succeeded(mut command: Command, what: &str) -> String {
    let output = command.output().unwrap();
    assert!(
        output.status.success(),
        "{what} failed ({}):\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

fn read_yaml(path: &Path) -> Value {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|err| panic!("{}: {err}", path.display()));
    serde_saphyr::from_str(&text).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
}

/// `value` with every integral float as an integer: kustomize writes the CRDs' `65535.0`
/// back as `65535`, the same number to the API server.
fn normalized(value: &Value) -> Value {
    match value {
        Value::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() && f.fract() == 0.0 && f.abs() < 9.0e15 => json!(f as i64),
            _ => value.clone(),
        },
        Value::Array(items) => Value::Array(items.iter().map(normalized).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), normalized(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// The kinds of the admission policy fencing the operator's log pods
/// (deploy/rbac/log-pod-policy.yaml): a policy and its binding.
const ADMISSION_POLICY_KINDS: [&str; 2] = [
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
];

/// The tenants' ClusterRoles (deploy/rbac/tenant-roles.yaml).
const TENANT_ROLES: [&str; 2] = ["batchbridge-edit", "batchbridge-view"];

/// The objects of a rendered multi-document YAML stream.
struct Manifests(Vec<Value>);

impl Manifests {
    fn parse(yaml: &str) -> Self {
        let docs: Vec<Value> = serde_saphyr::from_multiple(yaml)
            .unwrap_or_else(|err| panic!("rendered YAML does not parse: {err}\n{yaml}"));
        Self(docs.into_iter().filter(|doc| !doc.is_null()).collect())
    }

    fn of_kind(&self, kind: &str) -> Vec<&Value> {
        self.0.iter().filter(|o| o["kind"] == kind).collect()
    }

    /// The operator's own ClusterRole: the one that is not a tenants' role.
    fn operator_role(&self) -> &Value {
        let roles: Vec<_> = self
            .of_kind("ClusterRole")
            .into_iter()
            .filter(|role| !TENANT_ROLES.contains(&name(role)))
            .collect();
        assert_eq!(roles.len(), 1, "{roles:#?}");
        roles[0]
    }

    fn only(&self, kind: &str) -> &Value {
        let found = self.of_kind(kind);
        assert_eq!(
            found.len(),
            1,
            "expected exactly one {kind}, got {found:#?}"
        );
        found[0]
    }
}

fn name(object: &Value) -> &str {
    object["metadata"]["name"]
        .as_str()
        .unwrap_or_else(|| panic!("no metadata.name in {object:#}"))
}

fn namespace(object: &Value) -> Option<&str> {
    object["metadata"]["namespace"].as_str()
}

/// What a rendering must look like.
struct Expect<'a> {
    /// Where the operator runs.
    operator_namespace: &'a str,
    /// The one namespace it watches; every namespace when None.
    watch_namespace: Option<&'a str>,
    /// The operator's image, which its log pods also run.
    image: &'a str,
    /// Whether the rendering turns the `local` scheduler on (off unless the installer asks).
    local_scheduler: bool,
}

/// The checks a user would make of a rendering, and the dry run that proves the API server
/// accepts every object in it.
fn check(tools: &Tools, yaml: &str, expect: &Expect<'_>) {
    let objects = Manifests::parse(yaml);
    let op_ns = expect.operator_namespace;

    // Cluster-scoped objects carry no namespace; every namespaced one says where it goes
    // (one without would land in whatever namespace kubectl's context names).
    let cluster_scoped = [
        "CustomResourceDefinition",
        "ClusterRole",
        "ClusterRoleBinding",
        "Namespace",
    ];
    for object in &objects.0 {
        let kind = object["kind"].as_str().unwrap();
        if cluster_scoped.contains(&kind) {
            assert_eq!(namespace(object), None, "{kind} {}", name(object));
        } else if ADMISSION_POLICY_KINDS.contains(&kind) {
            // Cluster-scoped too, but kustomize 5.7's built-in schema predates them, so its
            // namespace transformer gives them the operator's namespace; kubectl and the API
            // server drop it (the dry run below shows they are accepted).
            assert!(
                namespace(object).is_none_or(|ns| ns == op_ns),
                "{kind} {}",
                name(object)
            );
        } else {
            let ns = namespace(object)
                .unwrap_or_else(|| panic!("{kind} {} has no metadata.namespace", name(object)));
            assert!(
                ns == op_ns || Some(ns) == expect.watch_namespace,
                "{kind} {} is in namespace {ns}",
                name(object)
            );
        }
    }

    // The CRDs: exactly the generated files.
    let mut crd_files: Vec<_> = std::fs::read_dir(repo().join("deploy/crds"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| {
            let file = path.file_name().unwrap().to_str().unwrap();
            file.starts_with("batchbridge.dev_") && file.ends_with(".yaml")
        })
        .collect();
    crd_files.sort();
    let crds = objects.of_kind("CustomResourceDefinition");
    assert_eq!(crds.len(), crd_files.len(), "CRDs: {crd_files:?}");
    for file in &crd_files {
        let want = read_yaml(file);
        let got = crds
            .iter()
            .find(|crd| name(crd) == name(&want))
            .unwrap_or_else(|| panic!("no CRD {} rendered", name(&want)));
        assert!(
            normalized(&got["spec"]) == normalized(&want["spec"]),
            "CRD {} differs from {}",
            name(&want),
            file.display()
        );
    }

    // The operator's permissions are deploy/rbac/'s, word for word.
    let cluster_role = objects.operator_role();
    let source = read_yaml(&repo().join("deploy/rbac/cluster-role.yaml"));
    assert!(source["rules"].as_array().is_some_and(|r| !r.is_empty()));
    assert_eq!(cluster_role["rules"], source["rules"], "ClusterRole rules");
    let lease_source = read_yaml(&repo().join("deploy/rbac/leader-election-role.yaml"));

    // The tenants' roles, word for word, aggregating into the built-in roles: edit into
    // `edit` and `admin` (never `view`: it can use the namespace's Secrets), view into `view`.
    let tenant_source = Manifests::parse(
        &std::fs::read_to_string(repo().join("deploy/rbac/tenant-roles.yaml")).unwrap(),
    );
    for (role, aggregates_to) in [
        ("batchbridge-edit", &["edit", "admin"][..]),
        ("batchbridge-view", &["view"][..]),
    ] {
        let find = |objects: &Manifests| {
            objects
                .of_kind("ClusterRole")
                .into_iter()
                .find(|r| name(r) == role)
                .cloned()
                .unwrap_or_else(|| panic!("no ClusterRole {role}"))
        };
        let (got, want) = (find(&objects), find(&tenant_source));
        assert_eq!(got["rules"], want["rules"], "{role}");
        let aggregated: BTreeSet<&str> = got["metadata"]["labels"]
            .as_object()
            .unwrap()
            .iter()
            .filter(|(_, value)| **value == "true")
            .filter_map(|(key, _)| key.strip_prefix("rbac.authorization.k8s.io/aggregate-to-"))
            .collect();
        assert_eq!(
            aggregated,
            aggregates_to.iter().copied().collect(),
            "{role}"
        );
        let verbs = |resource: &str| -> BTreeSet<&str> {
            got["rules"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|rule| {
                    rule["resources"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|r| r == resource)
                })
                .flat_map(|rule| {
                    rule["verbs"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|v| v.as_str().unwrap())
                })
                .collect()
        };
        for status in ["batchjobs/status", "batchclusters/status"] {
            assert!(
                verbs(status)
                    .iter()
                    .all(|v| ["get", "list", "watch"].contains(v)),
                "{role} must not write {status}"
            );
        }
        assert_eq!(
            verbs("batchjobs").contains("create"),
            role == "batchbridge-edit",
            "{role}"
        );
    }

    let deployment = objects.only("Deployment");
    assert_eq!(namespace(deployment), Some(op_ns));
    let pod = &deployment["spec"]["template"]["spec"];
    let account = pod["serviceAccountName"].as_str().unwrap();
    let service_account = objects.only("ServiceAccount");
    assert_eq!(name(service_account), account);
    assert_eq!(namespace(service_account), Some(op_ns));
    let the_account = json!([{"kind": "ServiceAccount", "name": account, "namespace": op_ns}]);

    // The leader-election Role, bound in the operator's namespace.
    let role = objects.only("Role");
    assert_eq!(namespace(role), Some(op_ns));
    assert_eq!(
        role["rules"], lease_source["rules"],
        "leader-election rules"
    );
    let bindings = objects.of_kind("RoleBinding");
    let role_ref = |kind: &str, name: &str| json!({"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name});
    let lease_binding = bindings
        .iter()
        .find(|b| b["roleRef"] == role_ref("Role", self::name(role)))
        .unwrap_or_else(|| panic!("no RoleBinding of the leader-election Role: {bindings:#?}"));
    assert_eq!(namespace(lease_binding), Some(op_ns));
    assert_eq!(lease_binding["subjects"], the_account);

    // The container and its environment.
    let containers = pod["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 1, "{containers:#?}");
    let container = &containers[0];
    let env = |var: &str| -> Option<&Value> {
        container["env"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == var)
    };
    let env_value = |var: &str| env(var).and_then(|e| e["value"].as_str());
    let env_field = |var: &str| env(var).map(|e| &e["valueFrom"]["fieldRef"]["fieldPath"]);
    assert_eq!(container["image"], expect.image);
    assert_eq!(env_value("OPERATOR_IMAGE"), Some(expect.image));
    assert!(
        container["args"].is_null() || container["args"] == json!(["run"]),
        "{}",
        container["args"]
    );

    // Which namespaces: the binding of the ClusterRole and WATCH_NAMESPACE agree.
    let cluster_bindings = objects.of_kind("ClusterRoleBinding");
    let operator_bindings: Vec<_> = bindings
        .iter()
        .filter(|b| b["roleRef"] == role_ref("ClusterRole", name(cluster_role)))
        .collect();
    match expect.watch_namespace {
        None => {
            assert_eq!(cluster_bindings.len(), 1, "{cluster_bindings:#?}");
            let binding = cluster_bindings[0];
            assert_eq!(
                binding["roleRef"],
                role_ref("ClusterRole", name(cluster_role))
            );
            assert_eq!(binding["subjects"], the_account);
            assert!(operator_bindings.is_empty(), "{operator_bindings:#?}");
            assert_eq!(
                env("WATCH_NAMESPACE"),
                None,
                "all namespaces: no WATCH_NAMESPACE"
            );
        }
        Some(watched) => {
            assert!(cluster_bindings.is_empty(), "{cluster_bindings:#?}");
            assert_eq!(operator_bindings.len(), 1, "{bindings:#?}");
            let binding = operator_bindings[0];
            assert_eq!(namespace(binding), Some(watched));
            assert_eq!(binding["subjects"], the_account);
            assert_eq!(env_value("WATCH_NAMESPACE"), Some(watched));
        }
    }

    // Leader election on a Lease in the pod's own namespace, identity the pod's name.
    assert_eq!(
        env_field("LEASE_NAMESPACE"),
        Some(&json!("metadata.namespace"))
    );
    assert!(env_value("LEASE_NAME").is_some_and(|n| !n.is_empty()));
    assert_eq!(env_field("POD_NAME"), Some(&json!("metadata.name")));

    // Security: non-root 65532, no privilege escalation, no capabilities, read-only root,
    // the runtime's seccomp profile.
    let pod_security = &pod["securityContext"];
    let security = &container["securityContext"];
    assert_eq!(pod_security["runAsNonRoot"], true);
    assert_eq!(pod_security["runAsUser"], UID);
    assert_eq!(pod_security["seccompProfile"]["type"], "RuntimeDefault");
    assert_eq!(security["runAsNonRoot"], true);
    assert_eq!(security["runAsUser"], UID);
    assert_eq!(security["readOnlyRootFilesystem"], true);
    assert_eq!(security["allowPrivilegeEscalation"], false);
    assert_eq!(security["capabilities"]["drop"], json!(["ALL"]));
    assert_eq!(security["seccompProfile"]["type"], "RuntimeDefault");

    // The local scheduler, whose jobs would run with the operator's rights: off unless asked.
    let local = if expect.local_scheduler {
        "true"
    } else {
        "false"
    };
    assert_eq!(env_value("ENABLE_LOCAL_SCHEDULER"), Some(local));
    assert_eq!(env("LOCAL_STATE_DIR").is_some(), expect.local_scheduler);

    // The SSH connections' private directories: in memory, under XDG_RUNTIME_DIR.
    let runtime_dir = env_value("XDG_RUNTIME_DIR").expect("XDG_RUNTIME_DIR is set");
    let mount = container["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["mountPath"] == runtime_dir)
        .unwrap_or_else(|| panic!("nothing mounted on {runtime_dir}"));
    let volume = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == mount["name"])
        .unwrap();
    assert_eq!(volume["emptyDir"]["medium"], "Memory", "{volume}");

    // A writable /tmp: an emptyDir.
    let tmp = container["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["mountPath"] == "/tmp")
        .unwrap_or_else(|| panic!("nothing mounted on /tmp: {}", container["volumeMounts"]));
    let volume = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == tmp["name"])
        .unwrap();
    assert!(volume["emptyDir"].is_object(), "/tmp volume: {volume}");
    assert_ne!(tmp["readOnly"], true);

    // Resources: requests for the scheduler, a memory limit.
    let resources = &container["resources"];
    for what in ["cpu", "memory"] {
        assert!(
            resources["requests"][what].is_string(),
            "requests.{what}: {resources}"
        );
    }
    assert!(resources["limits"]["memory"].is_string(), "{resources}");

    // Probes on the metrics port, which METRICS_ADDR binds and the Service exposes.
    let metrics_port = container["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "http-metrics")
        .unwrap_or_else(|| panic!("no port http-metrics: {}", container["ports"]))["containerPort"]
        .as_u64()
        .unwrap();
    assert_eq!(
        env_value("METRICS_ADDR"),
        Some(format!("0.0.0.0:{metrics_port}").as_str())
    );
    for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
        let get = &container[probe]["httpGet"];
        assert_eq!(get["path"], path, "{probe}");
        assert!(
            get["port"] == "http-metrics" || get["port"] == metrics_port,
            "{probe} port {}",
            get["port"]
        );
    }
    let service = objects.only("Service");
    assert_eq!(namespace(service), Some(op_ns));
    let annotations = &service["metadata"]["annotations"];
    assert_eq!(annotations["prometheus.io/scrape"], "true");
    assert_eq!(annotations["prometheus.io/port"], metrics_port.to_string());
    assert_eq!(annotations["prometheus.io/path"], "/metrics");
    let port = &service["spec"]["ports"][0];
    assert_eq!(port["name"], "http-metrics");
    assert!(port["targetPort"] == "http-metrics" || port["targetPort"] == metrics_port);
    // The Service and the Deployment select the operator's pods.
    let pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
        .as_object()
        .unwrap();
    for selector in [
        &service["spec"]["selector"],
        &deployment["spec"]["selector"]["matchLabels"],
    ] {
        let selector = selector.as_object().unwrap();
        assert!(!selector.is_empty());
        for (key, value) in selector {
            assert_eq!(pod_labels.get(key), Some(value), "selector {key}");
        }
    }

    check_log_pod_policy(&objects, &the_account, expect.image);

    // And the API server accepts every object.
    let accepted = tools.dry_run(yaml);
    assert_eq!(accepted.len(), objects.0.len(), "{accepted:#?}");
    for object in &objects.0 {
        let kind = object["kind"].as_str().unwrap().to_lowercase();
        assert!(
            accepted.iter().any(|line| line
                .split_once('/')
                .is_some_and(|(resource, n)| n == name(object)
                    && resource.split('.').next() == Some(kind.as_str()))),
            "{kind}/{} not in the dry run's answer: {accepted:#?}",
            name(object)
        );
    }
}

/// The admission policy of a rendering is deploy/rbac/log-pod-policy.yaml's, judging the
/// requests of the rendering's operator account (`account`, its one subject) and allowing
/// its `image`, and its binding denies what it refuses.
fn check_log_pod_policy(objects: &Manifests, account: &Value, image: &str) {
    let policy = objects.only("ValidatingAdmissionPolicy");
    let binding = objects.only("ValidatingAdmissionPolicyBinding");
    assert_eq!(binding["spec"]["policyName"], name(policy));
    assert_eq!(binding["spec"]["validationActions"], json!(["Deny"]));

    let user = format!(
        "system:serviceaccount:{}:{}",
        account[0]["namespace"].as_str().unwrap(),
        account[0]["name"].as_str().unwrap()
    );
    let mut want = read_yaml(&repo().join("deploy/rbac/log-pod-policy.yaml"))["spec"].clone();
    want["matchConditions"] = json!([{
        "name": "operator-service-account",
        "expression": format!("request.userInfo.username == '{user}'"),
    }]);
    want["variables"] = json!([{"name": "image", "expression": format!("'{image}'")}]);
    assert_eq!(policy["spec"], want, "the admission policy of {user}");
}

/// The chart's files/ and crds/ are symbolic links into deploy/rbac/ and deploy/crds/, so
/// the permissions and CRDs have one source; helm follows them.
#[test]
fn the_chart_links_the_single_sources() {
    let links = [
        ("files/cluster-role.yaml", "deploy/rbac/cluster-role.yaml"),
        (
            "files/leader-election-role.yaml",
            "deploy/rbac/leader-election-role.yaml",
        ),
        ("files/tenant-roles.yaml", "deploy/rbac/tenant-roles.yaml"),
        (
            "files/log-pod-policy.yaml",
            "deploy/rbac/log-pod-policy.yaml",
        ),
        (
            "files/grafana-dashboard.json",
            "deploy/grafana/batchbridge.json",
        ),
    ];
    for (link, target) in links {
        let path = chart().join(link);
        assert!(
            path.symlink_metadata().unwrap().file_type().is_symlink(),
            "{link} is not a symbolic link"
        );
        assert_eq!(
            path.canonicalize().unwrap(),
            repo().join(target).canonicalize().unwrap(),
            "{link}"
        );
    }
    // Every generated CRD has its link in the chart's crds/, and nothing else is there.
    let names = |dir: &Path| -> BTreeSet<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect()
    };
    let mut generated = names(&repo().join("deploy/crds"));
    generated.retain(|file| file.starts_with("batchbridge.dev_"));
    assert!(!generated.is_empty());
    assert_eq!(names(&chart().join("crds")), generated);
    for file in &generated {
        let link = chart().join("crds").join(file);
        assert!(link.symlink_metadata().unwrap().file_type().is_symlink());
        assert_eq!(
            link.canonicalize().unwrap(),
            repo()
                .join("deploy/crds")
                .join(file)
                .canonicalize()
                .unwrap()
        );
    }
}

/// `helm lint --strict` in both modes, and the packaged chart (what a chart repository
/// serves) holds the linked files' contents and renders the same ClusterRole.
#[test]
fn the_chart_lints_and_packages_with_its_linked_files() {
    let tools = Tools::new();
    let chart = chart();
    let chart = chart.to_str().unwrap();
    let repository = format!("image.repository={CHART_REPOSITORY}");
    for sets in [
        &[][..],
        &["--set", "watchNamespace=research"][..],
        &["--set", &every_switch_on().join(",")][..],
    ] {
        let mut args = vec!["lint", "--strict", chart, "--set", &repository];
        args.extend(sets);
        let out = tools.helm(&args);
        println!("{out}");
        assert!(
            out.contains("1 chart(s) linted, 0 chart(s) failed"),
            "{out}"
        );
    }

    let dir = tempfile::tempdir().unwrap();
    let out = tools.helm(&[
        "package",
        chart,
        "--destination",
        dir.path().to_str().unwrap(),
    ]);
    let packages: Vec<PathBuf> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    assert_eq!(packages.len(), 1, "{out}");
    let yaml = tools.template(&packages[0], "batchbridge-system", &[]);
    let objects = Manifests::parse(&yaml);
    let source = read_yaml(&repo().join("deploy/rbac/cluster-role.yaml"));
    assert_eq!(objects.operator_role()["rules"], source["rules"]);
    assert_eq!(objects.of_kind("ClusterRole").len(), 1 + TENANT_ROLES.len());
    assert_eq!(objects.of_kind("CustomResourceDefinition").len(), 2);
}

#[test]
fn helm_chart_watching_every_namespace() {
    let tools = Tools::new();
    let operator_ns = unique("deploy-helm-all");
    let _namespaces = tools.namespaces(&[&operator_ns]);
    let yaml = tools.template(&chart(), &operator_ns, &[]);
    check(
        &tools,
        &yaml,
        &Expect {
            operator_namespace: &operator_ns,
            watch_namespace: None,
            image: &chart_image(),
            local_scheduler: false,
        },
    );
}

#[test]
fn helm_chart_watching_one_namespace() {
    let tools = Tools::new();
    let operator_ns = unique("deploy-helm-op");
    let watched = unique("deploy-helm-jobs");
    let _namespaces = tools.namespaces(&[&operator_ns, &watched]);
    let yaml = tools.template(
        &chart(),
        &operator_ns,
        &[
            &format!("watchNamespace={watched}"),
            "image.repository=registry.example.com/hpc/batchbridge-operator",
            "image.tag=1.2.3-test",
        ],
    );
    check(
        &tools,
        &yaml,
        &Expect {
            operator_namespace: &operator_ns,
            watch_namespace: Some(&watched),
            image: "registry.example.com/hpc/batchbridge-operator:1.2.3-test",
            local_scheduler: false,
        },
    );
}

/// Without leader election there is no Lease Role and no LEASE_NAMESPACE, and the chart
/// refuses to run two replicas that would both run the controllers.
#[test]
fn helm_chart_without_leader_election() {
    let tools = Tools::new();
    let yaml = tools.template(
        &chart(),
        "batchbridge-system",
        &["leaderElection.enabled=false"],
    );
    let objects = Manifests::parse(&yaml);
    assert!(objects.of_kind("Role").is_empty());
    assert!(objects.of_kind("RoleBinding").is_empty());
    let env = &objects.only("Deployment")["spec"]["template"]["spec"]["containers"][0]["env"];
    assert!(
        !env.as_array()
            .unwrap()
            .iter()
            .any(|e| e["name"] == "LEASE_NAMESPACE"),
        "{env}"
    );

    let message = tools.helm_fails(&[
        "template",
        RELEASE,
        chart().to_str().unwrap(),
        "--set",
        "leaderElection.enabled=false",
        "--set",
        "replicaCount=2",
    ]);
    assert!(
        message.contains("replicaCount > 1 needs leaderElection.enabled"),
        "{message}"
    );
}

/// The `local` scheduler is on only when the installer turns it on: the Helm value
/// `localScheduler.enabled`, or the kustomize component `local-scheduler` in an overlay, as
/// its comment shows. And `tenantRoles.create=false` leaves the cluster-wide tenants' roles
/// to another release.
#[test]
fn the_installer_turns_the_local_scheduler_on() {
    let tools = Tools::new();
    let helm_ns = unique("deploy-helm-local");
    let kust_ns = unique("deploy-kust-local");
    let _namespaces = tools.namespaces(&[&helm_ns, &kust_ns]);
    let yaml = tools.template(&chart(), &helm_ns, &["localScheduler.enabled=true"]);
    let expect = |namespace, image| Expect {
        operator_namespace: namespace,
        watch_namespace: None,
        image,
        local_scheduler: true,
    };
    let (helm_image, kustomize_image) = (chart_image(), kustomize_image());
    check(&tools, &yaml, &expect(&helm_ns, &helm_image));

    let copy = kustomize_copy();
    edit_line(
        &copy.path().join("deploy/kustomize/base/kustomization.yaml"),
        "namespace:",
        &format!("namespace: {kust_ns}"),
    );
    let overlay = copy.path().join("deploy/kustomize/development");
    std::fs::create_dir_all(&overlay).unwrap();
    std::fs::write(
        overlay.join("kustomization.yaml"),
        "resources:\n- ../base\ncomponents:\n- ../local-scheduler\n",
    )
    .unwrap();
    let yaml = tools.kubectl(&["kustomize", overlay.to_str().unwrap()]);
    check(&tools, &yaml, &expect(&kust_ns, &kustomize_image));

    let yaml = tools.template(&chart(), &helm_ns, &["tenantRoles.create=false"]);
    let roles = Manifests::parse(&yaml);
    assert_eq!(roles.of_kind("ClusterRole").len(), 1);
    roles.operator_role();
}

/// An installer limits where BatchClusters and BatchJobs may make the operator connect: the
/// Helm values `allowedSshTargets` and `objectStores.allowedEndpoints` reach the operator as
/// ALLOWED_SSH_TARGETS and ALLOWED_OBJECT_STORES (which the operator reads back as the same
/// lists), and `networkPolicy.enabled` adds an egress NetworkPolicy the API server accepts,
/// allowing DNS, the API, the login nodes' and the object stores' networks only.
#[test]
fn the_installer_limits_where_the_operator_connects() {
    let tools = Tools::new();
    let helm_ns = unique("deploy-helm-egress");
    let _namespaces = tools.namespaces(&[&helm_ns]);
    let env_of = |yaml: &str, name: &str| -> Option<String> {
        let objects = Manifests::parse(yaml);
        let deployment = objects.only("Deployment");
        deployment["spec"]["template"]["spec"]["containers"][0]["env"]
            .as_array()
            .unwrap()
            .iter()
            .find(|var| var["name"] == name)
            .map(|var| var["value"].as_str().unwrap().to_owned())
    };

    let yaml = tools.template(&chart(), &helm_ns, &[]);
    assert_eq!(
        env_of(&yaml, "ALLOWED_SSH_TARGETS"),
        None,
        "any target by default"
    );
    assert_eq!(
        env_of(&yaml, "ALLOWED_OBJECT_STORES"),
        None,
        "no object store by default"
    );
    assert!(Manifests::parse(&yaml).of_kind("NetworkPolicy").is_empty());

    let yaml = tools.template(
        &chart(),
        &helm_ns,
        &[
            "allowedSshTargets={login.hpc.example.org:22,*.lab.example.org,10.20.0.0/16:22-2222}",
            "networkPolicy.enabled=true",
            "networkPolicy.apiServer.cidrs={10.96.0.1/32}",
            "networkPolicy.ssh[0].cidr=10.20.0.0/16",
            "networkPolicy.ssh[0].ports={22,2222}",
            "objectStores.allowedEndpoints={https://s3.example.org,http://10.30.0.5:9000}",
            "networkPolicy.objectStores[0].cidr=10.30.0.0/24",
            "networkPolicy.objectStores[0].ports={9000}",
            "networkPolicy.objectStores[1].cidr=52.0.0.0/8",
        ],
    );
    let stores = env_of(&yaml, "ALLOWED_OBJECT_STORES").unwrap();
    let parsed: batchbridge_operator::staging::AllowedStores = stores.parse().unwrap();
    assert_eq!(
        parsed.to_string(),
        "https://s3.example.org, http://10.30.0.5:9000"
    );
    let targets = env_of(&yaml, "ALLOWED_SSH_TARGETS").unwrap();
    let parsed: batchbridge_operator::cluster::targets::SshTargets = targets.parse().unwrap();
    assert_eq!(
        parsed.to_string(),
        "login.hpc.example.org:22, *.lab.example.org, [10.20.0.0/16]:22-2222"
    );
    let objects = Manifests::parse(&yaml);
    let policy = objects.only("NetworkPolicy");
    assert_eq!(policy["spec"]["policyTypes"], serde_json::json!(["Egress"]));
    let egress = policy["spec"]["egress"].as_array().unwrap();
    let allowed: Vec<(String, Vec<i64>)> = egress
        .iter()
        .filter_map(|rule| {
            let cidr = rule["to"][0]["ipBlock"]["cidr"].as_str()?.to_owned();
            let ports = rule["ports"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["port"].as_i64().unwrap())
                .collect();
            Some((cidr, ports))
        })
        .collect();
    assert_eq!(
        allowed,
        [
            ("10.96.0.1/32".to_owned(), vec![6443]),
            ("10.20.0.0/16".to_owned(), vec![22, 2222]),
            ("10.30.0.0/24".to_owned(), vec![9000]),
            ("52.0.0.0/8".to_owned(), vec![443]),
        ]
    );
    let pod_labels = &objects.only("Deployment")["spec"]["template"]["metadata"]["labels"];
    for (key, value) in policy["spec"]["podSelector"]["matchLabels"]
        .as_object()
        .unwrap()
    {
        assert_eq!(
            &pod_labels[key], value,
            "the policy selects the operator's pods"
        );
    }
    let image = chart_image();
    check(
        &tools,
        &yaml,
        &Expect {
            operator_namespace: &helm_ns,
            watch_namespace: None,
            image: &image,
            local_scheduler: false,
        },
    );

    // Without the API server's address the operator could not work: refused at install.
    let refused = tools.helm_fails(&[
        "template",
        RELEASE,
        chart().to_str().unwrap(),
        "--set",
        "networkPolicy.enabled=true",
    ]);
    assert!(
        refused.contains("networkPolicy.apiServer.cidrs"),
        "{refused}"
    );
}

/// Where the installers mount a Kerberos configuration, and the KRB5_CONFIG they set.
const KRB5_DIR: &str = "/etc/batchbridge/krb5";

/// The operator container's KRB5_CONFIG, the mount of the directory it names and the pod's
/// volume behind that mount, of the one Deployment in `yaml`; None when it has no
/// KRB5_CONFIG (then no mount and no volume of the Kerberos configuration either).
fn krb5_config_of(yaml: &str) -> Option<(String, Value, Value)> {
    let objects = Manifests::parse(yaml);
    let pod = &objects.only("Deployment")["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let mount = container["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|mount| mount["mountPath"] == KRB5_DIR)
        .cloned();
    let config = container["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|var| var["name"] == "KRB5_CONFIG")
        .map(|var| var["value"].as_str().unwrap().to_owned());
    let Some(config) = config else {
        assert_eq!(mount, None, "a Kerberos mount without KRB5_CONFIG");
        return None;
    };
    let mount = mount.unwrap_or_else(|| panic!("KRB5_CONFIG {config} without a mount"));
    let volume = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|volume| volume["name"] == mount["name"])
        .cloned()
        .unwrap();
    Some((config, mount, volume))
}

/// Asserts that `found` is a read-only mount of ConfigMap `config_map`'s key krb5.conf alone,
/// named by KRB5_CONFIG.
fn assert_krb5_config_mounted(found: Option<(String, Value, Value)>, config_map: &str) {
    let (config, mount, volume) = found.unwrap();
    assert_eq!(config, format!("{KRB5_DIR}/krb5.conf"));
    assert_eq!(mount["readOnly"], true, "{mount}");
    assert_eq!(
        volume["configMap"],
        json!({"name": config_map, "items": [{"key": "krb5.conf", "path": "krb5.conf"}]}),
        "{volume}"
    );
}

/// A Kerberos configuration for keytab BatchClusters is the installer's choice, off by
/// default: the Helm value `kerberos.krb5ConfConfigMap`, or the kustomize component
/// `kerberos` in an overlay, mounts that ConfigMap's krb5.conf read-only into the operator
/// and names it in KRB5_CONFIG, and the API server accepts the result. The schema refuses a
/// value that is no ConfigMap name.
#[test]
fn the_installer_gives_the_operator_a_krb5_conf() {
    let tools = Tools::new();
    let helm_ns = unique("deploy-helm-krb5");
    let kust_ns = unique("deploy-kust-krb5");
    let _namespaces = tools.namespaces(&[&helm_ns, &kust_ns]);
    let expect = |namespace, image| Expect {
        operator_namespace: namespace,
        watch_namespace: None,
        image,
        local_scheduler: false,
    };
    let (helm_image, kustomize_image) = (chart_image(), kustomize_image());

    assert_eq!(
        krb5_config_of(&tools.template(&chart(), &helm_ns, &[])),
        None
    );
    let yaml = tools.template(
        &chart(),
        &helm_ns,
        &["kerberos.krb5ConfConfigMap=site-krb5"],
    );
    assert_krb5_config_mounted(krb5_config_of(&yaml), "site-krb5");
    check(&tools, &yaml, &expect(&helm_ns, &helm_image));
    let refused = tools.helm_fails(&[
        "template",
        RELEASE,
        chart().to_str().unwrap(),
        "--set",
        &format!("image.repository={CHART_REPOSITORY}"),
        "--set",
        "kerberos.krb5ConfConfigMap=Site_krb5",
    ]);
    assert!(
        refused.contains("/kerberos/krb5ConfConfigMap'"),
        "{refused}"
    );

    let base = repo().join("deploy/kustomize/base");
    let yaml = tools.kubectl(&["kustomize", base.to_str().unwrap()]);
    assert_eq!(krb5_config_of(&yaml), None);
    let copy = kustomize_copy();
    edit_line(
        &copy.path().join("deploy/kustomize/base/kustomization.yaml"),
        "namespace:",
        &format!("namespace: {kust_ns}"),
    );
    let overlay = copy.path().join("deploy/kustomize/site");
    std::fs::create_dir_all(&overlay).unwrap();
    std::fs::write(
        overlay.join("kustomization.yaml"),
        "resources:\n- ../base\ncomponents:\n- ../kerberos\n",
    )
    .unwrap();
    let yaml = tools.kubectl(&["kustomize", overlay.to_str().unwrap()]);
    assert_krb5_config_mounted(krb5_config_of(&yaml), "batchbridge-krb5");
    check(&tools, &yaml, &expect(&kust_ns, &kustomize_image));
}

/// Copies deploy/crds, deploy/rbac and deploy/kustomize into a temporary deploy/, where a
/// test edits them as the kustomization files tell a user to.
fn kustomize_copy() -> tempfile::TempDir {
    fn copy(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            let target = to.join(entry.file_name());
            if entry.file_type().unwrap().is_dir() {
                copy(&entry.path(), &target);
            } else {
                std::fs::copy(entry.path(), &target).unwrap();
            }
        }
    }
    let dir = tempfile::tempdir().unwrap();
    for part in ["crds", "rbac", "kustomize"] {
        copy(
            &repo().join("deploy").join(part),
            &dir.path().join("deploy").join(part),
        );
    }
    dir
}

/// Replaces the one line of `file` that, trimmed, starts with `prefix` by `line` (indented
/// as the old one).
fn edit_line(file: &Path, prefix: &str, line: &str) {
    let text = std::fs::read_to_string(file).unwrap();
    let matching: Vec<_> = text
        .lines()
        .filter(|l| l.trim_start().starts_with(prefix))
        .collect();
    assert_eq!(
        matching.len(),
        1,
        "{}: expected one line starting with {prefix:?}",
        file.display()
    );
    let old = matching[0];
    let indent = &old[..old.len() - old.trim_start().len()];
    let edited = text.replacen(old, &format!("{indent}{line}"), 1);
    std::fs::write(file, edited).unwrap();
}

#[test]
fn kustomize_base_watches_every_namespace() {
    let tools = Tools::new();
    // As checked in: namespace batchbridge-system, the image README's kind/minikube command
    // builds and loads.
    let base = repo().join("deploy/kustomize/base");
    let objects = Manifests::parse(&tools.kubectl(&["kustomize", base.to_str().unwrap()]));
    let deployment = objects.only("Deployment");
    assert_eq!(namespace(deployment), Some("batchbridge-system"));
    assert_eq!(
        deployment["spec"]["template"]["spec"]["containers"][0]["image"],
        kustomize_image()
    );
    assert_eq!(name(objects.only("Namespace")), "batchbridge-system");

    // Moved to another namespace and image the documented way: the base's `namespace:` and
    // `images:`.
    let copy = kustomize_copy();
    let kustomization = copy.path().join("deploy/kustomize/base/kustomization.yaml");
    let operator_ns = unique("deploy-kust-all");
    edit_line(
        &kustomization,
        "namespace:",
        &format!("namespace: {operator_ns}"),
    );
    edit_line(
        &kustomization,
        "newName:",
        "newName: registry.example.com/hpc/batchbridge-operator",
    );
    edit_line(&kustomization, "newTag:", "newTag: 1.2.3-test");
    let _namespaces = tools.namespaces(&[&operator_ns]);
    let dir = copy.path().join("deploy/kustomize/base");
    let yaml = tools.kubectl(&["kustomize", dir.to_str().unwrap()]);
    assert_eq!(name(Manifests::parse(&yaml).only("Namespace")), operator_ns);
    check(
        &tools,
        &yaml,
        &Expect {
            operator_namespace: &operator_ns,
            watch_namespace: None,
            image: "registry.example.com/hpc/batchbridge-operator:1.2.3-test",
            local_scheduler: false,
        },
    );
}

#[test]
fn kustomize_overlay_watches_one_namespace() {
    let tools = Tools::new();
    // As checked in: the operator in batchbridge-system watching `default`.
    let overlay = repo().join("deploy/kustomize/single-namespace");
    let objects = Manifests::parse(&tools.kubectl(&["kustomize", overlay.to_str().unwrap()]));
    let binding = objects
        .of_kind("RoleBinding")
        .into_iter()
        .find(|b| b["roleRef"]["kind"] == "ClusterRole")
        .unwrap();
    assert_eq!(namespace(binding), Some("default"));
    assert_eq!(binding["subjects"][0]["namespace"], "batchbridge-system");

    // Moved the documented way: the base's `namespace:` and watch-namespace.yaml's value.
    let copy = kustomize_copy();
    let operator_ns = unique("deploy-kust-op");
    let watched = unique("deploy-kust-jobs");
    edit_line(
        &copy.path().join("deploy/kustomize/base/kustomization.yaml"),
        "namespace:",
        &format!("namespace: {operator_ns}"),
    );
    edit_line(
        &copy
            .path()
            .join("deploy/kustomize/single-namespace/watch-namespace.yaml"),
        "value:",
        &format!("value: {watched}"),
    );
    let _namespaces = tools.namespaces(&[&operator_ns, &watched]);
    let dir = copy.path().join("deploy/kustomize/single-namespace");
    let yaml = tools.kubectl(&["kustomize", dir.to_str().unwrap()]);
    check(
        &tools,
        &yaml,
        &Expect {
            operator_namespace: &operator_ns,
            watch_namespace: Some(&watched),
            image: &kustomize_image(),
            local_scheduler: false,
        },
    );
}

/// The YAML of the README's "Deploy on Kubernetes" section is valid against the CRDs: each
/// block is applied in a fresh namespace with a server-side dry run (after the CRDs are
/// applied for real, as the section's install step does).
#[test]
fn readme_deploy_examples_are_valid() {
    let tools = Tools::new();
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let section = readme
        .split("\n## ")
        .find(|s| s.starts_with("Deploy on Kubernetes\n"))
        .expect("README has a section \"## Deploy on Kubernetes\"");
    // Kubernetes objects go to the API server; other tools' settings shown there (Kueue's
    // configuration) have no apiVersion and are not objects of this API server.
    let blocks: Vec<&str> = section
        .split("```yaml\n")
        .skip(1)
        .map(|rest| rest.split("\n```").next().unwrap())
        .filter(|block| block.lines().any(|line| line.starts_with("apiVersion:")))
        .collect();
    assert!(blocks.len() >= 2, "expected YAML examples, got {blocks:?}");

    for crd in std::fs::read_dir(repo().join("deploy/crds")).unwrap() {
        let path = crd.unwrap().path();
        if path
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("batchbridge.dev_")
        {
            // The manager the other CRD tests apply them with: the same content, one owner.
            tools.kubectl(&[
                "apply",
                "--server-side",
                "--force-conflicts",
                "--field-manager",
                "batchbridge-crds-test",
                "-f",
                path.to_str().unwrap(),
            ]);
        }
    }
    tools.wait_established(&[
        "crd/batchjobs.batchbridge.dev",
        "crd/batchclusters.batchbridge.dev",
    ]);

    let ns = unique("deploy-readme");
    let _namespaces = tools.namespaces(&[&ns]);
    let mut kinds = BTreeSet::new();
    for block in blocks {
        let objects = Manifests::parse(block);
        for object in &objects.0 {
            kinds.insert(object["kind"].as_str().unwrap().to_owned());
        }
        let accepted = tools.dry_run_in(block, &["-n", &ns]);
        assert_eq!(accepted.len(), objects.0.len(), "{block}\n=> {accepted:?}");
    }
    for kind in ["Secret", "BatchCluster", "BatchJob"] {
        assert!(
            kinds.contains(kind),
            "no {kind} among the examples: {kinds:?}"
        );
    }
}

/// The chart's switches that are off by default, turned on.
fn every_switch_on() -> [&'static str; 4] {
    [
        "podDisruptionBudget.enabled=true",
        "metrics.serviceMonitor.enabled=true",
        "metrics.prometheusRule.enabled=true",
        "metrics.grafanaDashboard.enabled=true",
    ]
}

/// Without `image.repository` the chart refuses to install, saying what to do: no registry
/// publishes the image, and a default would end in ImagePullBackOff.
#[test]
fn the_chart_needs_an_image() {
    let tools = Tools::new();
    let refused = tools.helm_fails(&["template", RELEASE, chart().to_str().unwrap()]);
    assert!(
        refused.contains("image.repository is required")
            && refused.contains("docker build")
            && refused.contains("kind/minikube"),
        "{refused}"
    );
}

/// Applies prometheus-operator's ServiceMonitor and PrometheusRule CRDs (deploy/testdata/,
/// the test bed has no prometheus-operator) so that dry runs validate the chart's objects
/// against their schemas.
fn install_prometheus_operator_crds(tools: &Tools) {
    let dir = repo().join("deploy/testdata/prometheus-operator-crds");
    tools.kubectl(&[
        "apply",
        "--server-side",
        "--force-conflicts",
        "--field-manager",
        "batchbridge-deploy-test-crds",
        "-f",
        dir.to_str().unwrap(),
    ]);
    tools.wait_established(&[
        "crd/servicemonitors.monitoring.coreos.com",
        "crd/prometheusrules.monitoring.coreos.com",
    ]);
}

/// The PodDisruptionBudget, ServiceMonitor, PrometheusRule and Grafana dashboard switches:
/// off by default; on, each renders an object that selects the operator's pods or Service
/// (the dashboard: a ConfigMap of deploy/grafana's JSON), and the whole rendering passes
/// [`check`]'s dry run (prometheus-operator's CRDs installed for it). The alerts pass
/// `promtool check rules` and `promtool test rules` and read only series the operator
/// exports. The admission policy is on by default and its switch turns it off.
#[test]
fn the_chart_switches_add_what_they_name() {
    let tools = Tools::new();
    let defaults = Manifests::parse(&tools.template(&chart(), "batchbridge-system", &[]));
    for kind in [
        "PodDisruptionBudget",
        "ServiceMonitor",
        "PrometheusRule",
        "ConfigMap",
    ] {
        assert!(
            defaults.of_kind(kind).is_empty(),
            "{kind} is off by default"
        );
    }
    for kind in ADMISSION_POLICY_KINDS {
        defaults.only(kind);
    }
    let without_policy = Manifests::parse(&tools.template(
        &chart(),
        "batchbridge-system",
        &["admissionPolicy.enabled=false"],
    ));
    for kind in ADMISSION_POLICY_KINDS {
        assert!(without_policy.of_kind(kind).is_empty(), "{kind}");
    }

    let ns = unique("deploy-helm-switches");
    let _namespaces = tools.namespaces(&[&ns]);
    install_prometheus_operator_crds(&tools);
    let mut sets = every_switch_on().to_vec();
    sets.push("replicaCount=2");
    let yaml = tools.template(&chart(), &ns, &sets);
    let objects = Manifests::parse(&yaml);
    let deployment = objects.only("Deployment");
    let pod_labels = &deployment["spec"]["template"]["metadata"]["labels"];
    let selects = |selector: &Value, labels: &Value| {
        let selector = selector.as_object().unwrap();
        !selector.is_empty() && selector.iter().all(|(key, value)| &labels[key] == value)
    };

    let budget = objects.only("PodDisruptionBudget");
    assert_eq!(budget["spec"]["maxUnavailable"], 1);
    assert!(selects(
        &budget["spec"]["selector"]["matchLabels"],
        pod_labels
    ));

    let service = objects.only("Service");
    let monitor = objects.only("ServiceMonitor");
    assert!(selects(
        &monitor["spec"]["selector"]["matchLabels"],
        &service["metadata"]["labels"]
    ));
    assert_eq!(
        monitor["spec"]["namespaceSelector"]["matchNames"],
        json!([ns])
    );
    assert_eq!(
        monitor["spec"]["endpoints"][0]["port"],
        service["spec"]["ports"][0]["name"]
    );
    assert_eq!(monitor["spec"]["endpoints"][0]["path"], "/metrics");

    let rule = objects.only("PrometheusRule");
    check_alerts(&rule["spec"]);

    // The dashboard's ConfigMap carries the Grafana sidecar's label and the dashboard as is.
    let dashboard = objects.only("ConfigMap");
    assert_eq!(dashboard["metadata"]["labels"]["grafana_dashboard"], "1");
    let shipped: Value =
        serde_json::from_str(dashboard["data"]["batchbridge.json"].as_str().unwrap()).unwrap();
    let source = std::fs::read_to_string(repo().join("deploy/grafana/batchbridge.json")).unwrap();
    assert_eq!(shipped, serde_json::from_str::<Value>(&source).unwrap());

    check(
        &tools,
        &yaml,
        &Expect {
            operator_namespace: &ns,
            watch_namespace: None,
            image: &chart_image(),
            local_scheduler: false,
        },
    );

    // A ServiceMonitor with no Service to scrape is refused at install.
    let refused = tools.helm_fails(&[
        "template",
        RELEASE,
        chart().to_str().unwrap(),
        "--set",
        &format!("image.repository={CHART_REPOSITORY}"),
        "--set",
        "metrics.serviceMonitor.enabled=true",
        "--set",
        "metrics.service.enabled=false",
    ]);
    assert!(
        refused.contains("metrics.serviceMonitor.enabled needs metrics.service.enabled"),
        "{refused}"
    );
}

/// promtool's output for `args`, run in `dir`; panics unless it succeeds.
fn promtool(dir: &Path, args: &[&str]) -> String {
    let output = Command::new("promtool")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|err| {
            panic!("promtool: {err} (apt-get install prometheus, as .ci/run does)")
        });
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "promtool {args:?}: {said}");
    said
}

/// The PrometheusRule's alerts: `promtool check rules` (Debian's `prometheus` package;
/// .ci/run installs it) accepts its groups, `promtool test rules` shows them firing when and
/// as they should, every metric an expression reads is a series the operator exports
/// ([`catalog::exported_series`], from its registry's own text), and README and the chart's
/// README list each alert.
fn check_alerts(rule_spec: &Value) {
    let alerts: Vec<&str> = rule_spec["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|group| group["rules"].as_array().unwrap())
        .map(|rule| rule["alert"].as_str().unwrap())
        .collect();
    assert_eq!(
        alerts,
        [
            "BatchbridgeReconcileErrors",
            "BatchbridgeSubmitFailureRatioHigh",
            "BatchbridgeClusterUnreachable",
            "BatchbridgeCredentialExpiringSoon",
        ]
    );

    // Both READMEs list every alert.
    for readme in [repo().join("README.md"), chart().join("README.md")] {
        let text = std::fs::read_to_string(&readme).unwrap();
        for alert in &alerts {
            assert!(
                text.contains(&format!("| `{alert}`")),
                "{} does not list {alert}",
                readme.display()
            );
        }
    }

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("rules.json"),
        serde_json::to_string(rule_spec).unwrap(),
    )
    .unwrap();
    let said = promtool(dir.path(), &["check", "rules", "rules.json"]);
    assert!(said.contains("SUCCESS: 4 rules found"), "{said}");

    // And they fire when they should, with the words they should, over two hours from the
    // Unix epoch (promtool's clock): half of cluster hpc's submits fail (fires once pending
    // 15 minutes), a tenth of cluster fine's do not; the BatchJob controller's reconciles
    // fail every minute, the BatchCluster one's do not; hpc stops answering at minute 10
    // (fires after 5 minutes of it), fine answers throughout; hpc's certificate expires at
    // 25 hours (within a day from the first hour on), fine's in two days.
    let scraped = r#"instance="10.0.0.1:8080",pod="operator-1""#;
    let series = |name: &str, labels: &str, values: &str| json!({"series": format!("{name}{{{labels},{scraped}}}"), "values": values});
    let per_minute = |n: u32| format!("0+{n}x120");
    let (hpc, fine) = (
        r#"batchjob_namespace="research",batchcluster="hpc""#,
        r#"batchjob_namespace="research",batchcluster="fine""#,
    );
    let hpc_labels = |severity: &str| json!({"severity": severity, "batchjob_namespace": "research", "batchcluster": "hpc"});
    let ratio_alert = json!({
        "exp_labels": hpc_labels("warning"),
        "exp_annotations": {
            "summary": "batchbridge submits to a cluster are failing",
            "description": "50% of the submits to the cluster this alert's labels name failed \
                over the last 15 minutes. kubectl describe on its BatchCluster and its failed \
                BatchJobs says why.",
        },
    });
    let reconcile_alert = json!({
        "exp_labels": {"severity": "warning", "controller": "BatchJob", "reason": "Kube"},
        "exp_annotations": {
            "summary": "batchbridge BatchJob reconciles are failing (Kube)",
            "description": "Reconciles of the BatchJob controller have failed with Kube for 15 \
                minutes. The operator's log and the objects' Events say which and why.",
        },
    });
    let unreachable_alert = json!({
        "exp_labels": hpc_labels("critical"),
        "exp_annotations": {
            "summary": "BatchCluster research/hpc is unreachable",
            "description": "The operator has not reached the scheduler of BatchCluster hpc in \
                namespace research for 5 minutes. kubectl describe batchcluster says why (its \
                Reachable condition's reason and message).",
        },
    });
    let expiring_alert = json!({
        "exp_labels": hpc_labels("warning"),
        "exp_annotations": {
            "summary": "The SSH certificate of BatchCluster research/hpc expires within a day",
            "description": "The SSH certificate BatchCluster hpc in namespace research logs in \
                with expires in 23h 0m 0s (negative: it has expired). Put a renewed \
                certificate in the Secret its secretRef names; kubectl describe batchcluster \
                shows its CredentialValid condition.",
        },
    });
    let tests = json!({
        "rule_files": ["rules.json"],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [
                series("batchbridge_submits_total", hpc, &per_minute(10)),
                series("batchbridge_submit_failures_total", hpc, &per_minute(5)),
                series("batchbridge_submits_total", fine, &per_minute(10)),
                series("batchbridge_submit_failures_total", fine, &per_minute(1)),
                series("batchbridge_reconcile_errors_total", r#"controller="BatchJob",reason="Kube""#, &per_minute(1)),
                series("batchbridge_reconcile_errors_total", r#"controller="BatchCluster",reason="Kube""#, &per_minute(0)),
                series("batchbridge_cluster_reachable", hpc, "1x10 0x110"),
                series("batchbridge_cluster_reachable", fine, "1x120"),
                series("batchbridge_credential_expiry_timestamp_seconds", hpc, "90000x120"),
                series("batchbridge_credential_expiry_timestamp_seconds", fine, "172800x120"),
            ],
            "alert_rule_test": [
                {"eval_time": "10m", "alertname": "BatchbridgeSubmitFailureRatioHigh"},
                {"eval_time": "10m", "alertname": "BatchbridgeReconcileErrors"},
                {"eval_time": "30m", "alertname": "BatchbridgeSubmitFailureRatioHigh", "exp_alerts": [ratio_alert]},
                {"eval_time": "30m", "alertname": "BatchbridgeReconcileErrors", "exp_alerts": [reconcile_alert]},
                {"eval_time": "14m", "alertname": "BatchbridgeClusterUnreachable"},
                {"eval_time": "16m", "alertname": "BatchbridgeClusterUnreachable", "exp_alerts": [unreachable_alert]},
                {"eval_time": "60m", "alertname": "BatchbridgeCredentialExpiringSoon"},
                {"eval_time": "120m", "alertname": "BatchbridgeCredentialExpiringSoon", "exp_alerts": [expiring_alert]},
            ],
        }],
    });
    std::fs::write(dir.path().join("tests.json"), tests.to_string()).unwrap();
    let said = promtool(dir.path(), &["test", "rules", "tests.json"]);
    assert!(said.contains("SUCCESS"), "{said}");

    let exported = catalog::exported_series();
    for rule in rule_spec["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|group| group["rules"].as_array().unwrap())
    {
        let expr = rule["expr"].as_str().unwrap();
        let read = catalog::metric_names(expr);
        assert!(!read.is_empty(), "{expr}");
        for metric in read {
            assert!(
                exported.contains_key(&metric),
                "{} reads {metric}, which the operator does not export: {:?}",
                rule["alert"],
                exported.keys()
            );
        }
    }
}

/// values.yaml, parsed.
fn chart_values() -> Value {
    read_yaml(&chart().join("values.yaml"))
}

/// values.schema.json, parsed.
fn chart_schema() -> Value {
    let path = chart().join("values.schema.json");
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
        .unwrap_or_else(|err| panic!("{}: {err}", path.display()))
}

/// Asserts that `schema` describes exactly the keys of `values` wherever it lists properties,
/// and refuses any other key there. A schema without properties is a map of free keys
/// (labels, annotations) or a Kubernetes type the API server validates.
fn assert_schema_matches(values: &Value, schema: &Value, path: &str) {
    let Some(properties) = schema["properties"].as_object() else {
        return;
    };
    assert_eq!(
        schema["additionalProperties"], false,
        "{path}: the schema must refuse unknown keys"
    );
    let values = values
        .as_object()
        .unwrap_or_else(|| panic!("{path}: an object in the schema, {values} in values.yaml"));
    let in_values: BTreeSet<&String> = values.keys().collect();
    let in_schema: BTreeSet<&String> = properties.keys().collect();
    assert_eq!(
        in_values, in_schema,
        "{path}: values.yaml's keys and the schema's"
    );
    for (key, value) in values {
        assert_schema_matches(value, &properties[key], &format!("{path}.{key}"));
    }
}

/// values.schema.json describes every key of values.yaml and no other, refuses unknown keys
/// at every level it lists, and helm applies it: a misspelt key and a wrong type are refused.
#[test]
fn the_values_schema_matches_the_values_and_refuses_others() {
    assert_schema_matches(&chart_values(), &chart_schema(), "values");

    let tools = Tools::new();
    let repository = format!("image.repository={CHART_REPOSITORY}");
    for (set, says) in [
        ("imag.tag=1.2.3", "additional properties 'imag' not allowed"),
        (
            "metrics.serviceMonitor.intervall=10s",
            "additional properties 'intervall' not allowed",
        ),
        (
            "replicaCount=two",
            "/replicaCount': got string, want integer",
        ),
        (
            "admissionPolicy.enabled=yes",
            "/admissionPolicy/enabled': got string, want boolean",
        ),
        ("logFormat=xml", "/logFormat'"),
    ] {
        let refused = tools.helm_fails(&[
            "template",
            RELEASE,
            chart().to_str().unwrap(),
            "--set",
            &repository,
            "--set",
            set,
        ]);
        assert!(refused.contains(says), "--set {set}: {refused}");
    }
}

/// One row of the chart README's table of values.
struct ValueRow {
    key: String,
    kind: String,
    default: String,
    description: String,
}

/// The comment above each key of values.yaml, by the key's dotted path, in the file's order.
/// A blank line ends a comment that belongs to no key (the file's header).
fn value_comments(text: &str) -> Vec<(String, String)> {
    let mut comments = Vec::new();
    let mut pending: Vec<&str> = Vec::new();
    let mut parents: Vec<(usize, &str)> = Vec::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        if trimmed.is_empty() {
            pending.clear();
        } else if let Some(comment) = trimmed.strip_prefix('#') {
            pending.push(comment.trim());
        } else if trimmed.starts_with('-') {
            pending.clear();
        } else if let Some((key, _)) = trimmed.split_once(':') {
            while parents.last().is_some_and(|(at, _)| *at >= indent) {
                parents.pop();
            }
            let path: Vec<&str> = parents.iter().map(|(_, key)| *key).chain([key]).collect();
            comments.push((path.join("."), pending.join(" ")));
            pending.clear();
            parents.push((indent, key));
        }
    }
    comments
}

/// The README's rows: each value the schema takes as a whole (no properties of its own), in
/// values.yaml's order, with the schema's type, the default and the comment above it.
fn value_rows() -> Vec<ValueRow> {
    let text = std::fs::read_to_string(chart().join("values.yaml")).unwrap();
    let (values, schema) = (chart_values(), chart_schema());
    let mut rows = Vec::new();
    for (key, description) in value_comments(&text) {
        let (mut value, mut node) = (&values, &schema);
        let mut whole = true;
        for part in key.split('.') {
            if node["properties"].is_null() {
                whole = false; // inside a value taken as a whole
                break;
            }
            (value, node) = (&value[part], &node["properties"][part]);
        }
        if !whole || node["properties"].is_object() {
            continue;
        }
        let kind = match &node["type"] {
            Value::String(kind) => kind.clone(),
            Value::Array(kinds) => kinds
                .iter()
                .map(|k| k.as_str().unwrap())
                .collect::<Vec<_>>()
                .join(" or "),
            _ => node["oneOf"]
                .as_array()
                .unwrap_or_else(|| panic!("{key}: the schema gives no type"))
                .iter()
                .map(|alternative| alternative["type"].as_str().unwrap())
                .collect::<Vec<_>>()
                .join(" or "),
        };
        assert!(
            !description.is_empty(),
            "values.yaml: {key} has no comment to describe it"
        );
        rows.push(ValueRow {
            key,
            kind,
            default: serde_json::to_string(value).unwrap(),
            description,
        });
    }
    rows
}

/// The markers around the generated table in the chart's README.md.
const TABLE_START: &str =
    "<!-- values table: generated from values.yaml's comments by deploy_manifests.rs -->\n";
const TABLE_END: &str = "<!-- end of the values table -->\n";

/// The chart's README.md holds the table of values generated from values.yaml (key, type
/// from the schema, default, its comment), as Artifact Hub shows it. Run with
/// BATCHBRIDGE_WRITE_CHART_README=1 to write the table after changing values.yaml.
#[test]
fn the_chart_readme_lists_every_value() {
    let mut table = String::from("| Key | Type | Default | Description |\n|---|---|---|---|\n");
    for row in value_rows() {
        let cell = |text: &str| text.replace('|', "\\|");
        table.push_str(&format!(
            "| `{}` | {} | `{}` | {} |\n",
            row.key,
            row.kind,
            cell(&row.default),
            cell(&row.description)
        ));
    }
    let path = chart().join("README.md");
    let readme = std::fs::read_to_string(&path).unwrap();
    let (before, rest) = readme
        .split_once(TABLE_START)
        .unwrap_or_else(|| panic!("{}: no line {TABLE_START:?}", path.display()));
    let (_, after) = rest
        .split_once(TABLE_END)
        .unwrap_or_else(|| panic!("{}: no line {TABLE_END:?}", path.display()));
    let want = format!("{before}{TABLE_START}{table}{TABLE_END}{after}");
    if std::env::var_os("BATCHBRIDGE_WRITE_CHART_README").is_some() {
        std::fs::write(&path, &want).unwrap();
        return;
    }
    assert!(
        readme == want,
        "{} is stale: run BATCHBRIDGE_WRITE_CHART_README=1 cargo test -p batchbridge-operator \
         --test deploy_manifests the_chart_readme_lists_every_value",
        path.display()
    );
}

/// One way to change a pod's JSON.
type PodChange = dyn Fn(&mut Value);

/// The admission policy on the test bed's API server (v1.34): the chart's policy, binding
/// and RBAC installed for real in a fresh namespace, a log pod made by the operator's own
/// `output::log_pod` is admitted when the operator's ServiceAccount creates it, and the same
/// pod changed in any one way the policy forbids is refused with its message; a pod of any
/// shape from another user is not the policy's business. Pods are created with
/// `--dry-run=server`, which runs admission in full and stores nothing.
#[test]
fn the_admission_policy_admits_only_the_operators_log_pods() {
    use batchbridge_operator::crd::{BatchClusterSpec, BatchJob};

    let tools = Tools::new();
    let ns = unique("deploy-policy");
    let _namespaces = tools.namespaces(&[&ns]);
    let release = unique("bb-policy");
    let yaml = tools.template(
        &chart(),
        &ns,
        &[
            &format!("fullnameOverride={release}"),
            &format!("watchNamespace={ns}"),
        ],
    );
    let objects = Manifests::parse(&yaml);
    let role = objects.operator_role();
    let account = objects.only("ServiceAccount");
    let binding = objects
        .of_kind("RoleBinding")
        .into_iter()
        .find(|b| b["roleRef"]["name"] == name(role))
        .unwrap();
    let policy = objects.only("ValidatingAdmissionPolicy");
    let policy_binding = objects.only("ValidatingAdmissionPolicyBinding");
    let _cluster_objects = DeletedOnDrop {
        tools: &tools,
        args: vec![
            format!("clusterrole/{}", name(role)),
            format!("validatingadmissionpolicy/{}", name(policy)),
            format!("validatingadmissionpolicybinding/{}", name(policy_binding)),
        ],
    };
    let list = json!({
        "apiVersion": "v1",
        "kind": "List",
        "items": [role, account, binding, policy, policy_binding],
    });
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("fence.json");
    std::fs::write(&file, list.to_string()).unwrap();
    tools.kubectl(&[
        "apply",
        "--server-side",
        "--field-manager",
        FIELD_MANAGER,
        "-f",
        file.to_str().unwrap(),
    ]);

    // The log pod exactly as the operator makes it, for a BatchJob of this namespace.
    let job: BatchJob = serde_json::from_value(json!({
        "apiVersion": "batchbridge.dev/v1alpha1",
        "kind": "BatchJob",
        "metadata": {"name": "hello", "namespace": ns, "uid": "7d4c2b1a-0000-4000-8000-000000000001"},
        "spec": {"clusterRef": {"name": "hpc"}, "script": "echo hi"},
    }))
    .unwrap();
    let cluster: BatchClusterSpec = serde_json::from_value(json!({
        "scheduler": "slurm",
        "ssh": {"host": "login.hpc.example.org", "port": 22, "user": "alice"},
        "secretRef": {"name": "hpc-key"},
        "knownHosts": "login.hpc.example.org ssh-ed25519 AAAA",
    }))
    .unwrap();
    let log_pod = serde_json::to_value(batchbridge_operator::output::log_pod(
        &job,
        &cluster,
        &batchbridge_core::JobId::from("42"),
        &chart_image(),
    ))
    .unwrap();

    let operator = format!("system:serviceaccount:{ns}:{}", name(account));
    // kubectl's answer to creating `pod` as `user` (or as the test bed's admin).
    let create = |pod: &Value, user: Option<&str>| {
        let file = dir.path().join("pod.json");
        std::fs::write(&file, pod.to_string()).unwrap();
        let mut command = Command::new(&tools.kube.kubectl);
        command
            .arg("--kubeconfig")
            .arg(&tools.kube.kubeconfig)
            .args(user.map(|user| format!("--as={user}")))
            .args(["create", "--dry-run=server", "-o", "name", "-f"])
            .arg(&file);
        let output = command.output().unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        (output.status.success(), said)
    };

    let changed = |change: &PodChange| {
        let mut pod = log_pod.clone();
        change(&mut pod);
        pod
    };
    let foreign =
        changed(&|pod| pod["spec"]["containers"][0]["image"] = json!("docker.io/library/busybox"));
    // The API server takes up the new policy within a moment: wait until it refuses.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (admitted, said) = create(&foreign, Some(&operator));
        if !admitted && said.contains(name(policy)) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the policy did not refuse a foreign image within 30 s: {said}"
        );
        std::thread::sleep(std::time::Duration::from_millis(250));
    }

    let (admitted, said) = create(&log_pod, Some(&operator));
    assert!(admitted, "the operator's own log pod was refused: {said}");

    let refusals: [(&str, &PodChange, &str); 10] = [
        (
            "another image",
            &|pod| pod["spec"]["containers"][0]["image"] = json!("docker.io/library/busybox"),
            "the operator's own image in fetch-output mode",
        ),
        (
            "another command",
            &|pod| pod["spec"]["containers"][0]["command"] = json!(["/bin/sh", "-c", "id"]),
            "the operator's own image in fetch-output mode",
        ),
        (
            "a service account token",
            &|pod| pod["spec"]["automountServiceAccountToken"] = json!(true),
            "without its token",
        ),
        (
            "another service account",
            &|pod| pod["spec"]["serviceAccountName"] = json!("builder"),
            "default ServiceAccount",
        ),
        (
            "a hostPath volume",
            &|pod| {
                pod["spec"]["volumes"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"name": "root", "hostPath": {"path": "/"}}))
            },
            "only emptyDir and Secret volumes",
        ),
        (
            "privileged",
            // The API server's own validation refuses privileged without escalation.
            &|pod| {
                let security = &mut pod["spec"]["containers"][0]["securityContext"];
                security["privileged"] = json!(true);
                security["allowPrivilegeEscalation"] = json!(true);
            },
            "without privilege",
        ),
        (
            "an added capability",
            &|pod| {
                pod["spec"]["containers"][0]["securityContext"]["capabilities"]["add"] =
                    json!(["SYS_ADMIN"])
            },
            "added capabilities",
        ),
        (
            "the host network",
            &|pod| pod["spec"]["hostNetwork"] = json!(true),
            "no host namespace",
        ),
        (
            "the host PID namespace",
            &|pod| pod["spec"]["hostPID"] = json!(true),
            "no host namespace",
        ),
        (
            "no BatchJob owner",
            &|pod| {
                pod["metadata"]
                    .as_object_mut()
                    .unwrap()
                    .remove("ownerReferences");
            },
            "controlled by a BatchJob",
        ),
    ];
    for (what, change, says) in refusals {
        let pod = changed(change);
        let (admitted, said) = create(&pod, Some(&operator));
        assert!(
            !admitted && said.contains(name(policy)) && said.contains(says),
            "a log pod with {what} from the operator: expected a refusal saying {says:?}, got: {said}"
        );
        // Anyone else's pods are not the policy's business.
        let (admitted, said) = create(&pod, None);
        assert!(admitted, "the admin's pod with {what} was refused: {said}");
    }
}
