//! dnsloop's alerts and dashboard for a cluster (`deploy/prometheus/alerts.yaml`, the same rules
//! as a PrometheusRule in `deploy/prometheusrule.yaml`, `deploy/grafana-dashboard.json`):
//! promtool accepts the rules and every alert's unit tests pass, firing and silent; and on the
//! lab a real Prometheus scraping the tracers of two nodes fires the loop alert for the looping
//! node and nothing for the healthy one, while the live scrape passes `promtool check metrics`,
//! holds the series budget, and has every metric the rules and the dashboard query.
use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use dnsloop_tests::or_fail::OrFail as _;
use dnsloop_tests::test_name;
use dnsloop_tests::{
    lab::{
        node_underlay_on, Lab, Pod, Scenario, CLUSTER_DNS, CLUSTER_RECORDS, EXTERNAL_NAME,
        NODE_LOCAL_DNS,
    },
    privilege::{can_run, dnsloop_bin, Need},
    tracer::Tracer,
};
use serde_json::Value;

const RULES: &str = "prometheus/alerts.yaml";
const RULE_TESTS: &str = "prometheus/alerts_test.yaml";
const PROMETHEUS_RULE: &str = "prometheusrule.yaml";
const DASHBOARD: &str = "grafana-dashboard.json";
const LOOP_ALERT: &str = "DnsloopForwardingLoop";
/// Where each node's tracer serves its metrics, as in the DaemonSet.
const METRICS_PORT: u16 = 9553;
/// Prometheus' own port, on the loopback of the namespace it runs in.
const PROMETHEUS_ADDRESS: &str = "127.0.0.1:9090";
/// The scrape job's name, which `up{job="dnsloop"}` in the rules assumes (the operator names it
/// after the Service).
const JOB: &str = "dnsloop";
/// With 1 s scrapes and evaluations, the loop alert fires a few seconds after the loop is
/// found: this is the bound, not the expectation.
const ALERT_FIRES_WITHIN: Duration = Duration::from_secs(60);
/// How long the loop's storm is kept going at least before the series are counted.
const STORM: Duration = Duration::from_secs(8);
/// An address on the nodes' uplink subnet that no host holds: a query to it goes unanswered.
const NOBODY: std::net::Ipv4Addr = std::net::Ipv4Addr::new(10, 255, 0, 97);
/// What node 0's client asks [`NOBODY`]: a name nothing else in the test asks.
const NOBODY_ASKED: &str = "unanswered.example.test";
/// The most series one node's tracer may add to Prometheus on the lab's loop storm
/// (docs/operations.md's "Series per node"): with up and the scrape's own 4 series, it measures
/// about 105.
const SERIES_BUDGET: usize = 300;

fn deploy_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy")
        .join(name)
}

fn read_deploy_file(name: &str) -> String {
    let path = deploy_path(name);
    fs::read_to_string(&path).or_fail(format_args!("reading {}", path.display()))
}

fn yaml(name: &str) -> Value {
    serde_saphyr::from_str(&read_deploy_file(name)).or_fail(format_args!("{name} is not YAML"))
}

/// Every rule of the rule file, by alert name.
fn alert_rules() -> BTreeMap<String, Value> {
    yaml(RULES)["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .flat_map(|group| group["rules"].as_array().expect("a group's rules").clone())
        .map(|rule| {
            let name = rule["alert"].as_str().expect("every rule is an alert");
            (name.to_owned(), rule)
        })
        .collect()
}

/// Runs promtool with `args`; returns what it said, failing the test if it failed.
fn promtool(args: &[&str]) -> String {
    let output = Command::new("promtool")
        .args(args)
        .current_dir(deploy_path(""))
        .output()
        .expect("promtool runs");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "promtool {}:\n{said}",
        args.join(" ")
    );
    said
}

#[test]
fn the_rules_pass_promtool_and_their_unit_tests() {
    if !can_run(test_name!(), &[Need::Tool("promtool")]) {
        return;
    }
    let said = promtool(&["check", "rules", RULES]);
    assert!(
        said.contains(&format!("SUCCESS: {} rules found", alert_rules().len())),
        "{said}"
    );
    let said = promtool(&["test", "rules", RULE_TESTS]);
    assert!(said.contains("SUCCESS"), "{said}");
}

#[test]
fn every_alert_is_unit_tested_firing_and_silent_and_has_a_runbook() {
    let tests = yaml(RULE_TESTS);
    let cases: Vec<&Value> = tests["tests"]
        .as_array()
        .expect("tests")
        .iter()
        .flat_map(|test| test["alert_rule_test"].as_array().expect("alert_rule_test"))
        .collect();
    let runbooks =
        fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/operations.md"))
            .expect("docs/operations.md");
    for (name, rule) in alert_rules() {
        let tested = |firing: bool| {
            cases.iter().any(|case| {
                case["alertname"] == name.as_str()
                    && case["exp_alerts"]
                        .as_array()
                        .is_some_and(|expected| expected.is_empty() != firing)
            })
        };
        assert!(tested(true), "{name}: no unit test where it fires");
        assert!(tested(false), "{name}: no unit test where it stays silent");
        for annotation in ["summary", "description"] {
            assert!(
                rule["annotations"][annotation]
                    .as_str()
                    .is_some_and(|text| !text.is_empty()),
                "{name}: no {annotation}"
            );
        }
        assert!(
            ["critical", "warning"].contains(&rule["labels"]["severity"].as_str().unwrap_or("")),
            "{name}: a severity"
        );
        assert!(
            runbooks.contains(&format!("### {name}\n")),
            "{name}: no runbook section in docs/operations.md"
        );
    }
}

/// The PrometheusRule's head; its spec is the rule file's groups.
const PROMETHEUS_RULE_HEAD: &str = "\
# dnsloop's alerts for the Prometheus operator (kube-prometheus-stack and the like): the groups
# of prometheus/alerts.yaml as a PrometheusRule, generated from it by
# `DNSLOOP_BLESS=1 cargo test -p dnsloop-tests --test e2e prometheusrule`: edit alerts.yaml,
# not this file. Apply it after dnsloop.yaml on a cluster with the operator's CRDs
# (`kubectl get crd prometheusrules.monitoring.coreos.com`).
#
# The Prometheus has to select it: kube-prometheus-stack picks PrometheusRules carrying its
# `release: <release name>` label unless ruleSelectorNilUsesHelmValues is false, and only in the
# namespaces its ruleNamespaceSelector allows. What each alert means and what to do:
# docs/operations.md's \"Alerts and what to do\".
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: dnsloop
  namespace: dnsloop
  labels:
    app.kubernetes.io/name: dnsloop
    app.kubernetes.io/component: tracer
spec:
";

/// The PrometheusRule as generated from the rule file: its head, then the rule file from
/// `groups:` on, comments and all, indented under `spec`.
fn generated_prometheus_rule() -> String {
    let rules = read_deploy_file(RULES);
    let groups = rules
        .find("\ngroups:")
        .or_fail(format_args!("{RULES} has no top-level groups"));
    let mut generated = PROMETHEUS_RULE_HEAD.to_owned();
    for line in rules[groups + 1..].lines() {
        if !line.is_empty() {
            generated.push_str("  ");
        }
        generated.push_str(line);
        generated.push('\n');
    }
    generated
}

#[test]
fn the_prometheusrule_is_generated_from_the_rule_file() {
    let generated = generated_prometheus_rule();
    if std::env::var_os("DNSLOOP_BLESS").is_some() {
        fs::write(deploy_path(PROMETHEUS_RULE), &generated).expect("writing the PrometheusRule");
    }
    assert!(
        read_deploy_file(PROMETHEUS_RULE) == generated,
        "deploy/{PROMETHEUS_RULE} is not what deploy/{RULES} makes: run \
         `DNSLOOP_BLESS=1 cargo test -p dnsloop-tests --test e2e prometheusrule` and commit it"
    );
    let rule = yaml(PROMETHEUS_RULE);
    assert_eq!(rule["kind"], "PrometheusRule");
    assert_eq!(
        rule["spec"]["groups"],
        yaml(RULES)["groups"],
        "the PrometheusRule holds the rule file's groups"
    );
}

/// Every PromQL expression of the dashboard's panels, with the panel's title.
fn dashboard_queries() -> Vec<(String, String)> {
    let dashboard: Value =
        serde_json::from_str(&read_deploy_file(DASHBOARD)).expect("the dashboard is JSON");
    dashboard["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .flat_map(|panel| {
            let title = panel["title"].as_str().expect("a title").to_owned();
            let targets = panel["targets"].as_array().expect("targets");
            assert!(!targets.is_empty(), "{title}: queries nothing");
            targets
                .iter()
                .map(move |target| {
                    let expr = target["expr"].as_str().expect("an expr").to_owned();
                    (title.clone(), expr)
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn the_dashboards_queries_are_promql_that_promtool_accepts() {
    if !can_run(test_name!(), &[Need::Tool("promtool")]) {
        return;
    }
    // Grafana's variables, as Grafana fills them in; each query as a recording rule, which
    // promtool parses.
    let rules: Vec<Value> = dashboard_queries()
        .into_iter()
        .enumerate()
        .map(|(index, (_, expr))| {
            let expr = expr
                .replace("$__rate_interval", "1m")
                .replace("$node", ".*");
            serde_json::json!({"record": format!("dashboard:query{index}"), "expr": expr})
        })
        .collect();
    let count = rules.len();
    let file = serde_json::json!({"groups": [{"name": "dashboard", "rules": rules}]});
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("dashboard-rules.yaml");
    // JSON is YAML.
    fs::write(&path, file.to_string()).expect("writing the rules");
    let said = promtool(&["check", "rules", path.to_str().expect("a UTF-8 path")]);
    assert!(
        said.contains(&format!("SUCCESS: {count} rules found")),
        "{said}"
    );
}

/// The metric names an expression uses: dnsloop's, and `up`.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = expr;
    while let Some(start) = rest.find("dnsloop_") {
        let name: String = rest[start..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        rest = &rest[start + name.len()..];
        names.insert(name);
    }
    names
}

/// The sample names an exposition can hold: each family's, with the suffixes of its type.
fn exposed_names(exposition: &str) -> BTreeSet<String> {
    exposition
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .flat_map(|declaration| {
            let (family, kind) = declaration.split_once(' ').expect("# TYPE name type");
            let suffixes: &[&str] = match kind {
                "counter" => &["_total"],
                "histogram" => &["_bucket", "_sum", "_count"],
                _ => &[""],
            };
            suffixes
                .iter()
                .map(move |suffix| format!("{family}{suffix}"))
        })
        .collect()
}

/// The series of an exposition: one per sample line.
fn series(exposition: &str) -> Vec<&str> {
    exposition
        .lines()
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(|line| line.rsplit_once(' ').map_or(line, |(series, _)| series))
        .collect()
}

/// A Prometheus server running in a lab namespace from a directory of its own; killed (by PID)
/// when dropped.
struct Prometheus {
    child: Child,
    dir: tempfile::TempDir,
}

impl Prometheus {
    /// Starts Prometheus in `ns`, scraping `targets` (address, node) every second and evaluating
    /// dnsloop's rules every second.
    fn start(ns: &str, targets: &[(String, String)]) -> Prometheus {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let static_configs: Vec<Value> = targets
            .iter()
            .map(|(address, node)| {
                serde_json::json!({"targets": [address], "labels": {"node": node}})
            })
            .collect();
        let config = serde_json::json!({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [deploy_path(RULES)],
            "scrape_configs": [{"job_name": JOB, "static_configs": static_configs}],
        });
        let config_path = dir.path().join("prometheus.yml");
        fs::write(&config_path, config.to_string()).expect("writing prometheus.yml");
        let log = fs::File::create(dir.path().join("prometheus.log")).expect("a log file");
        let child = Command::new("ip")
            .args(["netns", "exec", ns, "prometheus"])
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={PROMETHEUS_ADDRESS}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("the log file"))
            .stderr(log)
            .spawn()
            .expect("starting prometheus");
        Prometheus { child, dir }
    }

    fn log(&self) -> String {
        fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// `GET /api/v1/PATH` from inside the lab namespace `ns`; `None` until Prometheus answers.
    fn api(&self, lab: &Lab, ns: &str, path: &str) -> Option<Value> {
        let url = format!("http://{PROMETHEUS_ADDRESS}/api/v1/{path}");
        let output = lab
            .exec(ns, &["curl", "-s", "--max-time", "5", "-g", &url])
            .ok()?;
        let answer: Value = serde_json::from_slice(&output.stdout).ok()?;
        (answer["status"] == "success").then(|| answer["data"].clone())
    }

    /// Polls `path` until `ready` holds for its data, for up to [`ALERT_FIRES_WITHIN`].
    fn until(&self, lab: &Lab, ns: &str, path: &str, ready: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + ALERT_FIRES_WITHIN;
        loop {
            let data = self.api(lab, ns, path);
            match data {
                Some(data) if ready(&data) => return data,
                _ if Instant::now() >= deadline => panic!(
                    "{path} after {ALERT_FIRES_WITHIN:?}: {data:#?}\n--- prometheus ---\n{}",
                    self.log()
                ),
                _ => thread::sleep(Duration::from_millis(500)),
            }
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The alerts Prometheus holds (pending or firing) for `node`, as (alertname, state).
fn alerts_for(alerts: &Value, node: &str) -> Vec<(String, String)> {
    alerts["alerts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|alert| alert["labels"]["node"] == node)
        .map(|alert| {
            (
                alert["labels"]["alertname"]
                    .as_str()
                    .unwrap_or("")
                    .to_owned(),
                alert["state"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

fn scrape(lab: &Lab, ns: &str, address: &str) -> String {
    let url = format!("http://{address}/metrics");
    let output = lab
        .exec(ns, &["curl", "-s", "--max-time", "5", &url])
        .or_fail(format_args!("curl {url}"));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// An OpenMetrics exposition in Prometheus' own text format, which promtool's linter reads: a
/// counter's family is declared under its samples' name (`_total`), and there is no `# EOF` or
/// `# UNIT`. Prometheus makes the same translation when it scrapes.
fn as_prometheus_text(exposition: &str) -> String {
    let counters: BTreeSet<&str> = exposition
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let mut text = String::new();
    for line in exposition.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let declared = ["# HELP ", "# TYPE "].into_iter().find_map(|prefix| {
            let (family, rest) = line.strip_prefix(prefix)?.split_once(' ')?;
            counters
                .contains(family)
                .then(|| format!("{prefix}{family}_total {rest}"))
        });
        text.push_str(declared.as_deref().unwrap_or(line));
        text.push('\n');
    }
    text
}

/// `promtool check metrics` on a scrape, failing the test on any problem it finds.
fn promtool_check_metrics(exposition: &str) {
    use std::io::Write as _;
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool runs");
    child
        .stdin
        .take()
        .expect("promtool's stdin")
        .write_all(as_prometheus_text(exposition).as_bytes())
        .expect("writing the scrape to promtool");
    let output = child.wait_with_output().expect("promtool ends");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success() && said.trim().is_empty(),
        "promtool check metrics:\n{said}\n--- scrape ---\n{exposition}"
    );
}

#[test]
fn a_real_prometheus_fires_the_loop_alert_for_the_looping_node_alone() {
    let test = test_name!();
    if !can_run(
        test,
        &[
            Need::Root,
            Need::DnsloopBinary,
            Need::Tool("prometheus"),
            Need::Tool("promtool"),
            Need::Tool("curl"),
        ],
    ) {
        return;
    }
    // Node 0 runs both CoreDNS pods and a node-local cache that forwards to them, and they back
    // to it: a loop of node 0's own. Node 1 has a client (and a cache) whose cluster names
    // CoreDNS on node 0 answers over the overlay.
    let lab = Lab::builder(Scenario::NodelocalLoop)
        .nodes(2)
        .start()
        .or_fail(test);
    let nodes = ["lab-node-0", "lab-node-1"];
    let metrics_addr = format!("0.0.0.0:{METRICS_PORT}");
    let _tracers: Vec<Tracer> = nodes
        .iter()
        .enumerate()
        .map(|(node, name)| {
            Tracer::start_with_env(
                &dnsloop_bin(),
                &lab,
                lab.node_ns_of(node).expect("a node"),
                &["--output", "json", "--metrics-addr", &metrics_addr],
                &[("NODE_NAME", name)],
            )
            .or_fail(format_args!("{test}: tracer on node {node}"))
        })
        .collect();
    // Prometheus runs on node 0, and reaches node 1's tracer at its address on the underlay, as
    // a cluster's reaches every node's.
    let targets = [
        (format!("127.0.0.1:{METRICS_PORT}"), nodes[0].to_owned()),
        (
            format!("{}:{METRICS_PORT}", node_underlay_on(1)),
            nodes[1].to_owned(),
        ),
    ];
    let prometheus_ns = lab.node_ns_of(0).expect("node 0").to_owned();
    let prometheus = Prometheus::start(&prometheus_ns, &targets);
    prometheus.until(&lab, &prometheus_ns, "targets", |data| {
        let active = data["activeTargets"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        active.len() == targets.len() && active.iter().all(|target| target["health"] == "up")
    });

    // The storm: node 0's client asks external names through its cache, round the loop; node
    // 1's client asks cluster names, answered.
    let node_cache = NODE_LOCAL_DNS.to_string();
    let cluster_dns = CLUSTER_DNS.to_string();
    let (cluster_name, _) = CLUSTER_RECORDS[0];
    let looping: Vec<String> = (0..3)
        .map(|n| format!("storm{n}.{EXTERNAL_NAME}"))
        .chain([EXTERNAL_NAME.to_owned()])
        .collect();
    // dnsloop_timeouts_total appears with the first timeout: the loop's unanswered queries,
    // counted from its report one --report-interval (10 s) after the first. Whether any of the
    // loop's forwards goes unanswered depends on the machine's load (dnsmasq answers those past
    // its limit of queries in flight), so node 0's client also asks, once, an address on the
    // uplink's subnet that nobody holds: a timeout node 0 reports whatever the loop does. Its
    // name is one no loop carries: the unanswered queries of a looping name are counted in
    // the loop's reports, not as timeouts.
    lab.dig(Pod::Client, &NOBODY.to_string(), &[NOBODY_ASKED])
        .or_fail(test);
    let node_metrics = &targets[0].0;
    let mut healthy_answers = 0;
    let started = Instant::now();
    while started.elapsed() < STORM
        || !scrape(&lab, &prometheus_ns, node_metrics).contains("\ndnsloop_timeouts_total{")
    {
        assert!(
            started.elapsed() < ALERT_FIRES_WITHIN,
            "no timeout counted on node 0 after {ALERT_FIRES_WITHIN:?} of its loop; it \
             serves:\n{}",
            scrape(&lab, &prometheus_ns, node_metrics)
        );
        for name in &looping {
            lab.dig_or_fail(Pod::Client, &node_cache, &[name]);
        }
        let outcome = lab
            .dig_from(1, Pod::Client, &cluster_dns, &[cluster_name])
            .or_fail(test);
        // One may time out while node 0's CoreDNS pods are busy with the storm.
        healthy_answers += usize::from(outcome.status.as_deref() == Some("NOERROR"));
    }
    assert!(healthy_answers > 0, "node 1's client got no answer");

    let alerts = prometheus.until(&lab, &prometheus_ns, "alerts", |data| {
        alerts_for(data, nodes[0]).contains(&(LOOP_ALERT.to_owned(), "firing".to_owned()))
    });
    assert_eq!(
        alerts_for(&alerts, nodes[1]),
        [],
        "the healthy node raises no alert: {alerts:#}"
    );
    // Both tracers have been scraped all along: node 1's silence is not for want of samples.
    let healthy_loops = prometheus
        .api(
            &lab,
            &prometheus_ns,
            &format!("query?query=dnsloop_loops_total{{node=\"{}\"}}", nodes[1]),
        )
        .expect("a query");
    assert_eq!(
        healthy_loops["result"][0]["value"][1], "0",
        "node 1's loops are scraped, and none: {healthy_loops:#}"
    );

    // What one looping node adds to Prometheus, as Prometheus stores it.
    let stored = prometheus
        .api(
            &lab,
            &prometheus_ns,
            &format!("query?query=count({{node=\"{}\"}})", nodes[0]),
        )
        .expect("a query");
    let stored: usize = stored["result"][0]["value"][1]
        .as_str()
        .and_then(|count| count.parse().ok())
        .or_fail(format_args!("a count: {stored:#}"));
    assert!(
        stored <= SERIES_BUDGET,
        "node 0 adds {stored} series to Prometheus, over the budget of {SERIES_BUDGET}"
    );

    let exposition = scrape(&lab, &prometheus_ns, node_metrics);
    eprintln!(
        "{test}: node 0 adds {stored} series to Prometheus ({} from dnsloop)",
        series(&exposition).len()
    );
    assert_series_follow_the_formula(&exposition);
    promtool_check_metrics(&exposition);

    let exposed = exposed_names(&exposition);
    let queried = dashboard_queries()
        .into_iter()
        .map(|(title, expr)| (format!("dashboard panel {title:?}"), expr))
        .chain(alert_rules().into_iter().map(|(name, rule)| {
            let expr = rule["expr"].as_str().expect("an expr").to_owned();
            (format!("alert {name}"), expr)
        }));
    for (what, expr) in queried {
        for name in metric_names(&expr) {
            assert!(
                exposed.contains(&name) || SERVED_FROM_THEIR_FIRST_FINDING.contains(&name.as_str()),
                "{what} queries {name}, which dnsloop does not serve ({expr}):\n{exposed:#?}"
            );
        }
    }
}

/// Counters by server that a tracer serves from the first finding they count on, which the loop
/// lab never makes: `dnsloop-userspace/src/metrics/tests.rs` checks their names and help.
const SERVED_FROM_THEIR_FIRST_FINDING: &[&str] = &[
    "dnsloop_truncations_not_retried_total",
    "dnsloop_search_list_wasted_queries_total",
    "dnsloop_fragmented_replies_lost_total",
];

/// docs/operations.md's "Series per node": one series per interface and direction in each of
/// the two packet counters, one per malformed reason, per drop reason, per server's timeouts
/// and per server and rcode answered, 16 per server's latency histogram (14 buckets, sum and
/// count), and 3 more (loops, unexpected sources, lost events).
fn assert_series_follow_the_formula(exposition: &str) {
    let series = series(exposition);
    let named = |name: &str| -> Vec<&str> {
        series
            .iter()
            .copied()
            .filter(|series| series.split('{').next() == Some(name))
            .collect()
    };
    let interface_directions = named("dnsloop_packets_total").len();
    let malformed_reasons = named("dnsloop_malformed_packets_total").len();
    let drop_reasons = named("dnsloop_dns_drops_total").len();
    let timeout_servers = named("dnsloop_timeouts_total").len();
    let server_rcodes = named("dnsloop_answers_total").len();
    let servers = named("dnsloop_answer_latency_seconds_count").len();
    let truncating = named("dnsloop_truncated_answers_total").len()
        + named("dnsloop_truncations_not_retried_total").len()
        + named("dnsloop_search_list_wasted_queries_total").len()
        + named("dnsloop_stale_conntrack_timeouts_total").len()
        + named("dnsloop_fragmented_replies_lost_total").len();
    let conntrack = named("dnsloop_conntrack_clashes_resolved_total").len()
        + named("dnsloop_conntrack_insert_failed_total").len()
        + named("dnsloop_conntrack_drops_total").len();
    assert!(conntrack <= 3, "{exposition}");
    assert_eq!(
        named("dnsloop_dns_packets_total").len(),
        interface_directions
    );
    let formula = 2 * interface_directions
        + malformed_reasons
        + drop_reasons
        + timeout_servers
        + server_rcodes
        + 16 * servers
        + truncating
        + conntrack
        + 6;
    assert_eq!(
        series.len(),
        formula,
        "{interface_directions} interface directions, {malformed_reasons} malformed reasons, \
         {drop_reasons} drop reasons, {timeout_servers} servers timed out, {server_rcodes} \
         server rcodes, {servers} servers answered, {truncating} truncating, {conntrack} \
         conntrack counters:\n{exposition}"
    );
}
