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
//! Namespaces are made for real with unique names, and deleted at the end (the API server
//! has no namespace controller, so they stay Terminating; `kube.sh down` clears them). A
//! test bed that is not up fails these tests; they never skip.

// Helpers panic on purpose: a refused manifest or a missing test bed is a failed test.
#![allow(clippy::unwrap_used)]

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

/// The image the code assumes by default, which the manifests must deploy by default.
fn default_image() -> String {
    format!("ghcr.io/batchbridge/operator:{}", env!("CARGO_PKG_VERSION"))
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
        let mut command = Command::new(&self.kube.kubectl);
        command
            .arg("--kubeconfig")
            .arg(&self.kube.kubeconfig)
            .args(args);
        succeeded(command, &format!("kubectl {args:?}"))
    }

    /// `helm template` of the chart in `source` (a directory or packaged chart) into
    /// `namespace`, CRDs included.
    fn template(&self, source: &Path, namespace: &str, sets: &[&str]) -> String {
        let mut args = vec![
            "template",
            RELEASE,
            source.to_str().unwrap(),
            "--namespace",
            namespace,
            "--include-crds",
        ];
        for set in sets {
            args.extend(["--set", set]);
        }
        self.helm(&args)
    }

    /// Creates namespaces for real; they are deleted when the guard drops.
    fn namespaces(&self, names: &[&str]) -> Namespaces<'_> {
        for name in names {
            self.kubectl(&["create", "namespace", name]);
        }
        Namespaces {
            tools: self,
            names: names.iter().map(|n| (*n).to_owned()).collect(),
        }
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

/// Namespaces a test made; deleted on drop, also when the test panics.
struct Namespaces<'a> {
    tools: &'a Tools,
    names: Vec<String>,
}

impl Drop for Namespaces<'_> {
    fn drop(&mut self) {
        let mut command = Command::new(&self.tools.kube.kubectl);
        command
            .arg("--kubeconfig")
            .arg(&self.tools.kube.kubeconfig)
            .args(["delete", "namespace", "--wait=false", "--ignore-not-found"])
            .args(&self.names);
        let output = command.output().unwrap();
        if !output.status.success() && !std::thread::panicking() {
            panic!(
                "deleting namespaces {:?}: {}",
                self.names,
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
    for sets in [&[][..], &["--set", "watchNamespace=research"][..]] {
        let mut args = vec!["lint", "--strict", chart];
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
            image: &default_image(),
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
    let image = default_image();
    let expect = |namespace| Expect {
        operator_namespace: namespace,
        watch_namespace: None,
        image: &image,
        local_scheduler: true,
    };
    check(&tools, &yaml, &expect(&helm_ns));

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
    check(&tools, &yaml, &expect(&kust_ns));

    let yaml = tools.template(&chart(), &helm_ns, &["tenantRoles.create=false"]);
    let roles = Manifests::parse(&yaml);
    assert_eq!(roles.of_kind("ClusterRole").len(), 1);
    roles.operator_role();
}

/// An installer limits where BatchClusters may make the operator connect: the Helm value
/// `allowedSshTargets` reaches the operator as ALLOWED_SSH_TARGETS (which the operator
/// reads back as the same list), and `networkPolicy.enabled` adds an egress NetworkPolicy
/// the API server accepts, allowing DNS, the API and the login nodes' networks only.
#[test]
fn the_installer_limits_where_the_operator_connects() {
    let tools = Tools::new();
    let helm_ns = unique("deploy-helm-egress");
    let _namespaces = tools.namespaces(&[&helm_ns]);
    let env_of = |yaml: &str| -> Option<String> {
        let objects = Manifests::parse(yaml);
        let deployment = objects.only("Deployment");
        deployment["spec"]["template"]["spec"]["containers"][0]["env"]
            .as_array()
            .unwrap()
            .iter()
            .find(|var| var["name"] == "ALLOWED_SSH_TARGETS")
            .map(|var| var["value"].as_str().unwrap().to_owned())
    };

    let yaml = tools.template(&chart(), &helm_ns, &[]);
    assert_eq!(env_of(&yaml), None, "any target by default");
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
        ],
    );
    let targets = env_of(&yaml).unwrap();
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
    let image = default_image();
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
    // As checked in: namespace batchbridge-system, the image the code assumes.
    let base = repo().join("deploy/kustomize/base");
    let objects = Manifests::parse(&tools.kubectl(&["kustomize", base.to_str().unwrap()]));
    let deployment = objects.only("Deployment");
    assert_eq!(namespace(deployment), Some("batchbridge-system"));
    assert_eq!(
        deployment["spec"]["template"]["spec"]["containers"][0]["image"],
        default_image()
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
            image: "ghcr.io/batchbridge/operator:1.2.3-test",
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
            image: &default_image(),
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
    let blocks: Vec<&str> = section
        .split("```yaml\n")
        .skip(1)
        .map(|rest| rest.split("\n```").next().unwrap())
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
    tools.kubectl(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
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
