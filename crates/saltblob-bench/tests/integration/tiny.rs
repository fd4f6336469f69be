use clap::Parser;
use saltblob_bench::{BenchArgs, ProbeArgs};
use serde_json::Value;

#[derive(Parser)]
struct BenchCli {
    #[command(flatten)]
    args: BenchArgs,
}

#[derive(Parser)]
struct ProbeCli {
    #[command(flatten)]
    args: ProbeArgs,
}

pub(crate) fn bench_args(extra: &[&str]) -> BenchArgs {
    let base = [
        "bench",
        "--count",
        "2",
        "--large-mb",
        "2",
        "--small-kb",
        "16",
        "--concurrency",
        "4",
        "--probe-size",
        "8MiB",
        "--probe-seconds",
        "0.1",
        // Paced phases as short as --mixed (the rate of a tiny run is in the thousands per second).
        "--paced-samples",
        "20",
        // And not 10 s longer when the small ops fall behind beside the bulk loops, whose bytes (deleted, not
        // reclaimed while the bench measures) would fill the memory store: 14 GB in 25 s on two quiet cores.
        "--paced-grace",
        "0.5",
    ];
    BenchCli::parse_from(base.iter().chain(extra)).args
}

pub(crate) const PHASES: [&str; 16] = [
    "large_write",
    "large_read",
    "small_write",
    "small_read",
    "unchunked_write",
    "unchunked_read",
    "small_alone",
    "bulk_alone",
    "small_under_load",
    "bulk_under_load",
    "paced_small_alone_rho0.25",
    "paced_small_under_load_rho0.25",
    "paced_bulk_under_load_rho0.25",
    "paced_small_alone_rho0.5",
    "paced_small_under_load_rho0.5",
    "paced_bulk_under_load_rho0.5",
];

/// The ratio `name` of a bench's JSON.
fn ratios_named<'a>(json: &'a Value, name: &str) -> &'a Value {
    json["ratios"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["name"] == name))
        .unwrap_or_else(|| panic!("no ratio {name}"))
}

/// The phase `name` of a bench's JSON.
fn phase_named<'a>(json: &'a Value, name: &str) -> &'a Value {
    json["phases"]
        .as_array()
        .and_then(|p| p.iter().find(|p| p["name"] == name))
        .unwrap_or_else(|| panic!("{name} missing"))
}

/// Every field of the JSON shape, and consistent numbers; `writers` large loops in the bulk phases.
fn check_shape(json: &Value, store: &str, writers: u64) {
    assert_eq!(json["store"], store);
    for field in ["store", "config", "reference", "phases"] {
        assert!(json.get(field).is_some(), "{field} missing");
    }
    assert!(json["reference"].is_object(), "{}", json["reference"]);
    assert!(
        json["reference"].get("error").is_none(),
        "{}",
        json["reference"]
    );
    let phases = json["phases"].as_array().expect("phases is an array");
    let names: Vec<&str> = phases.iter().filter_map(|p| p["name"].as_str()).collect();
    assert_eq!(names, PHASES);
    for p in phases {
        let name = p["name"].as_str().expect("name");
        for field in [
            "ops",
            "bytes",
            "seconds",
            "throughput_mib_s",
            "errors",
            "latency_ms",
        ] {
            assert!(p.get(field).is_some(), "{name}: {field} missing");
        }
        assert_eq!(p["errors"], 0, "{name}: {}", p["error_messages"]);
        let lat = &p["latency_ms"];
        let v = |f: &str| {
            lat[f]
                .as_f64()
                .unwrap_or_else(|| panic!("{name}: latency {f}: {lat}"))
        };
        assert!(v("min") <= v("p50"), "{name}: {lat}");
        assert!(
            v("p50") <= v("p95") && v("p95") <= v("p99"),
            "{name}: {lat}"
        );
        assert!(
            v("p99") <= v("p999") && v("p999") <= v("max"),
            "{name}: {lat}"
        );
        assert!(v("mean") >= 0.0 && v("mean") <= v("max"), "{name}: {lat}");
        let (bytes, seconds) = (
            p["bytes"].as_f64().expect("bytes"),
            p["seconds"].as_f64().expect("seconds"),
        );
        let tput = p["throughput_mib_s"].as_f64().expect("throughput");
        assert!(seconds > 0.0, "{name}");
        let expected = bytes / 1_048_576.0 / seconds;
        assert!(
            (tput - expected).abs() <= expected * 1e-9,
            "{name}: {tput} vs {expected}"
        );
        assert!(p["ops"].as_u64().expect("ops") > 0, "{name}");
        if name.ends_with("_read")
            || name.ends_with("alone")
            || name.ends_with("load")
            || name.starts_with("paced_small")
        {
            assert_eq!(p["verified"], true, "{name}");
        }
    }
    let ops = |n: usize| phases[n]["ops"].as_u64().expect("ops");
    let bytes = |n: usize| phases[n]["bytes"].as_u64().expect("bytes");
    assert_eq!((ops(0), ops(1)), (2, 2));
    assert_eq!(bytes(0), 4 << 20);
    // The small phases move the same volume as the large ones: 4 MiB in 16 KiB blobs.
    assert_eq!((ops(2), ops(3), bytes(2)), (256, 256, 4 << 20));
    assert_eq!(phases[4]["details"]["mode"], "saltblob_single_chunk");
    let phase = |name: &str| phase_named(json, name);
    let background = &phase("small_under_load")["details"]["background"];
    assert!(background["large_puts"].as_u64().is_some(), "{background}");
    assert_eq!(background["large_writers"], writers, "{background}");
    for name in ["bulk_alone", "bulk_under_load"] {
        // Every writer completes at least one put, whatever the timing.
        let details = &phase(name)["details"];
        let per_writer = details["per_writer"].as_array().expect("per_writer");
        assert_eq!(per_writer.len() as u64, writers, "{name}: {details}");
        let puts: u64 = per_writer
            .iter()
            .map(|w| w["large_puts"].as_u64().expect("large_puts"))
            .inspect(|&p| assert!(p >= 1, "{name}: {details}"))
            .sum();
        assert_eq!(details["large_puts"], puts, "{name}: {details}");
        assert_eq!(details["bytes"], phase(name)["bytes"], "{name}");
    }
    check_isolation(json, writers);
    let ratios = json["ratios"].as_array().expect("ratios");
    assert_eq!(ratios.len(), 28);
    // The dd pattern is measured by the device probe only; a store may write nothing to disk (memory).
    let device = json["reference"]["kind"] == "device";
    for r in ratios {
        let value = r["value"].as_f64();
        match r["name"].as_str() {
            Some(
                "large_write_vs_dd"
                | "large_write_vs_dd_beside"
                | "large_write_vs_durable_dd_beside"
                | "large_read_vs_dd"
                | "large_put_p99_vs_dd_ideal"
                | "large_put_p99_vs_dd_beside_ideal"
                | "large_write_vs_durable_dd"
                | "large_put_p99_vs_durable_ideal",
            ) if !device => assert!(
                value.is_none()
                    && r["computed"]
                        .as_str()
                        .is_some_and(|c| c.contains("dd-pattern")),
                "{r}"
            ),
            // The streaming put runs in a child `saltblob` process, only with --stream-mb.
            Some("stream_put_peak_rss_mib") => assert!(
                value.is_none()
                    && r["computed"]
                        .as_str()
                        .is_some_and(|c| c.contains("--stream-mb")),
                "{r}"
            ),
            Some("large_write_disk_bytes_per_byte") => {
                assert!(value.is_some_and(|v| v >= 0.0), "{r}");
            }
            // The sealed twins run only with --encrypt.
            Some(name) if name.starts_with("sealed_") => assert!(
                value.is_none() && r["computed"] == "run with --encrypt",
                "{r}"
            ),
            _ => assert!(value.is_some_and(|v| v > 0.0), "{r}"),
        }
    }
    assert_eq!(json["config"]["small_count"], 256);
    for step in [
        "blake3_s_per_gib",
        "crc32c_s_per_gib",
        "copy_s_per_gib",
        "floor_s_per_gib",
        "seal_s_per_gib",
    ] {
        assert!(
            json["cpu_steps"][step].as_f64().is_some_and(|v| v > 0.0),
            "{step}: {}",
            json["cpu_steps"]
        );
    }
    for phase in [&phases[0], &phases[1]] {
        let details = &phase["details"];
        assert!(
            details["cpu_seconds_per_gib"]
                .as_f64()
                .is_some_and(|v| v > 0.0),
            "{details}"
        );
    }
    assert!(json["cleanup"]["deleted_keys"].as_u64().expect("deleted") >= 2 + 256 + 2);
}

/// The `"isolation"` object: each class alone and under load from its phase, and the headline ratios.
pub(crate) fn check_isolation(json: &Value, writers: u64) {
    let iso = &json["isolation"];
    assert_eq!(iso["large_writers"], writers, "{iso}");
    assert_eq!(json["config"]["large_writers"], writers);
    for (load, class, phase) in [
        ("alone", "interactive", "small_alone"),
        ("alone", "bulk", "bulk_alone"),
        ("under_load", "interactive", "small_under_load"),
        ("under_load", "bulk", "bulk_under_load"),
    ] {
        let c = &iso[load][class];
        assert_eq!(c["phase"], phase, "{iso}");
        let from = json["phases"]
            .as_array()
            .and_then(|p| p.iter().find(|p| p["name"] == phase))
            .expect("phase");
        for field in ["ops", "bytes", "throughput_mib_s"] {
            assert_eq!(c[field], from[field], "{load}.{class}.{field}");
        }
        for p in ["p50", "p95", "p99", "p999", "max"] {
            assert_eq!(
                c["latency_ms"][p], from["latency_ms"][p],
                "{load}.{class}.{p}"
            );
        }
    }
    let f = |name: &str| {
        iso[name]
            .as_f64()
            .unwrap_or_else(|| panic!("{name}: {iso}"))
    };
    let small = f("small_p99_under_load_ms") / f("small_p99_alone_ms");
    assert!(
        (f("small_p99_ratio") - small).abs() <= small * 1e-12,
        "{iso}"
    );
    let bulk = f("bulk_throughput_under_load_mib_s") / f("bulk_throughput_alone_mib_s");
    assert!(
        (f("bulk_throughput_ratio") - bulk).abs() <= bulk * 1e-12,
        "{iso}"
    );
    // The closed loop is a stress figure: no goal.
    assert!(iso.get("small_p99_ratio_met").is_none(), "{iso}");
    check_reclaims(json);
    check_paced(json);
    let ratio = |name: &str| Some(ratios_named(json, name)["value"].clone());
    assert_eq!(
        ratio("small_p99_under_load_over_alone"),
        Some(iso["small_p99_ratio"].clone())
    );
    assert_eq!(
        ratio("bulk_throughput_under_load_over_alone"),
        Some(iso["bulk_throughput_ratio"].clone())
    );
}

/// `"isolation"."reclaims_between_phases"`: on a store, one after each phase with large loops, in order, which
/// together reclaimed what the loops deleted; none through S3.
fn check_reclaims(json: &Value) {
    let reclaims = json["isolation"]["reclaims_between_phases"]
        .as_array()
        .expect("reclaims_between_phases");
    if json["config"]["backend"] == saltblob_bench::bench::S3_BACKEND {
        assert!(reclaims.is_empty(), "{reclaims:?}");
        return;
    }
    let after: Vec<&str> = reclaims
        .iter()
        .filter_map(|r| r["after"].as_str())
        .collect();
    let bulk_phases: Vec<&str> = json["phases"]
        .as_array()
        .expect("phases")
        .iter()
        .filter_map(|p| p["name"].as_str())
        .filter(|n| n.starts_with("bulk_") || n.starts_with("paced_bulk_"))
        .collect();
    assert_eq!(after, bulk_phases, "{reclaims:?}");
    for r in reclaims {
        assert!(r["error"].is_null(), "{r}");
        assert!(r["seconds"].as_f64().is_some_and(|s| s >= 0.0), "{r}");
    }
    let versions: u64 = reclaims.iter().filter_map(|r| r["versions"].as_u64()).sum();
    assert!(
        versions > 0,
        "the large loops' deleted versions were reclaimed: {reclaims:?}"
    );
}

/// `"isolation"."paced"`: one entry per default load, each figure from its phases and the closed-loop
/// capacities.
fn check_paced(json: &Value) {
    let iso = &json["isolation"];
    let phase = |name: &str| phase_named(json, name);
    let num = |v: &Value, what: &str| v.as_f64().unwrap_or_else(|| panic!("{what}: {v}"));
    let x_star = num(&iso["small_capacity_ops_s"], "small capacity");
    assert_eq!(
        x_star,
        num(&phase("small_alone")["ops_per_s"], "small_alone ops/s")
    );
    let b_star = num(&iso["bulk_capacity_mib_s"], "bulk capacity");
    assert_eq!(
        b_star,
        num(&iso["bulk_throughput_alone_mib_s"], "bulk alone")
    );
    assert!(
        num(&iso["bulk_alone_cpu_cores"], "bulk cores") > 0.0,
        "{iso}"
    );
    let paced = iso["paced"].as_array().expect("paced is a list");
    assert_eq!(paced.len(), 2, "{iso}");
    for (p, rho) in paced.iter().zip([0.25, 0.5]) {
        assert_eq!(p["rho"], rho, "{p}");
        let rate = num(&p["rate_ops_s"], "rate");
        assert!((rate - rho * x_star).abs() <= rate * 1e-12, "{p}");
        let alone = phase(&format!("paced_small_alone_rho{rho}"));
        let loaded = phase(&format!("paced_small_under_load_rho{rho}"));
        let bulk = phase(&format!("paced_bulk_under_load_rho{rho}"));
        assert_eq!(p["small_p99_alone_ms"], alone["latency_ms"]["p99"], "{p}");
        assert_eq!(
            p["small_p99_under_load_ms"], loaded["latency_ms"]["p99"],
            "{p}"
        );
        assert_eq!(p["alone"]["succeeded"], alone["ops"], "{p}");
        // Gets and puts apart: both ran, and the slowest of either is the slowest of all.
        for side in ["alone", "under_load"] {
            let s = &p[side];
            let (get, put) = (&s["get_latency_ms"], &s["put_latency_ms"]);
            let slowest = num(&get["max"], "get max").max(num(&put["max"], "put max"));
            assert_eq!(slowest, num(&s["latency_ms"]["max"], "max"), "{s}");
            assert!(
                num(&get["p99"], "get p99") > 0.0 && num(&put["p99"], "put p99") > 0.0,
                "{s}"
            );
        }
        assert_eq!(p["under_load"]["succeeded"], loaded["ops"], "{p}");
        let intended = num(&p["under_load"]["intended"], "intended");
        assert!(intended >= 1.0, "{p}");
        assert_eq!(p["under_load"]["intended"], loaded["details"]["intended"]);
        let goodput = num(&loaded["ops"], "ops") / intended;
        assert!(
            (num(&p["small_goodput"], "goodput") - goodput).abs() < 1e-12,
            "{p}"
        );
        let (ratio, excess) = (
            num(&p["small_p99_under_load_ms"], "p99 load") / num(&p["small_p99_alone_ms"], "p99"),
            num(&p["small_p99_under_load_ms"], "p99 load") - num(&p["small_p99_alone_ms"], "p99"),
        );
        assert!(
            (num(&p["small_p99_ratio"], "ratio") - ratio).abs() <= ratio * 1e-12,
            "{p}"
        );
        assert!(
            (num(&p["small_p99_excess_ms"], "excess") - excess).abs() < 1e-9,
            "{p}"
        );
        let share = num(&bulk["throughput_mib_s"], "bulk") / b_star;
        assert!(
            (num(&p["bulk_share"], "share") - share).abs() <= share * 1e-12,
            "{p}"
        );
        let work = num(&p["under_load"]["achieved_ops_s"], "achieved") / x_star + share;
        assert!(
            (num(&p["work"], "work") - work).abs() <= work * 1e-12,
            "{p}"
        );
        assert!(p["goals"].is_object(), "{p}");
        assert!(p["verdict"].as_str().is_some_and(|v| !v.is_empty()), "{p}");
        // What the store's scheduler did in each paced phase, sampled every 100 ms: null where the bench's
        // process does not schedule (through S3, or with the scheduler off).
        for side in ["alone", "under_load"] {
            // How late the bench's runtime and a thread of its own woke from 1 ms sleeps meanwhile: both probes
            // ran for the whole phase, whatever the target.
            for probe in ["runtime", "thread"] {
                let w = &p[side]["wakeups"][probe];
                assert!(w["wakeups"].as_u64().is_some_and(|n| n >= 10), "{w}");
                assert!(w["stalls"].as_u64().is_some(), "{w}");
                let (p99, max) = (
                    num(&w["lag_ms"]["p99"], "p99"),
                    num(&w["lag_ms"]["max"], "max"),
                );
                assert!(0.0 <= p99 && p99 <= max, "{w}");
            }
            let t = &p[side]["scheduler"];
            if json["config"]["scheduler"]["enabled"] != true {
                assert!(t.is_null(), "{t}");
                continue;
            }
            assert!(t["samples"].as_u64().is_some_and(|n| n >= 2), "{t}");
            let duty = num(&t["mean_duty"], "mean duty");
            assert!(duty > 0.0 && duty <= 1.0, "{t}");
            assert!(num(&t["min_duty"], "min duty") <= duty, "{t}");
            let admitted: u64 = t["classes"]
                .as_object()
                .expect("classes")
                .values()
                .filter_map(|c| c["admitted"].as_u64())
                .sum();
            assert!(admitted > 0, "{t}");
        }
    }
    assert_eq!(
        json["config"]["small_loads"],
        serde_json::json!([0.25, 0.5])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tiny_bench_on_memory_reports_every_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let json_path = dir.path().join("out.json");
    let plot_path = dir.path().join("out.svg");
    let (j, p) = (
        json_path.to_string_lossy().into_owned(),
        plot_path.to_string_lossy().into_owned(),
    );
    let args = bench_args(&[
        "--unchunked",
        "--mixed",
        "0.5",
        "--large-writers",
        "2",
        "--json",
        &j,
        "--plot",
        &p,
    ]);
    let report = saltblob_bench::bench("memory://", &args, true)
        .await
        .expect("bench runs");
    assert_eq!(report.phases.len(), 16);
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(&json_path).expect("json written"))
            .expect("valid json");
    check_shape(&json, "memory://", 2);
    assert_eq!(json["config"]["scheduler"]["enabled"], true);
    assert_eq!(json["reference"]["kind"], "rows");
    assert_eq!(json["reference"]["read"]["verified"], true);
    let svg = std::fs::read_to_string(&plot_path).expect("plot written");
    assert!(
        svg.starts_with("<svg") && svg.contains("large_write"),
        "{}",
        &svg[..200.min(svg.len())]
    );
    // The isolation panels: closed loop without goals, paced with them.
    for text in [
        "closed loop, interactive: P99 ratio",
        "small ops under load",
        "closed loop, bulk (2 loop(s)): throughput ratio",
        "under small load",
        "paced: small P99",
        "paced: small goodput, bulk share, work W",
        "rho = 0.25",
        "rho = 0.5",
        "goal: the P99 allowed beside bulk",
    ] {
        assert!(svg.contains(text), "{text} not in the plot");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_small_rate_is_paced_whatever_the_capacity() {
    let dir = tempfile::tempdir().expect("tempdir");
    let json_path = dir.path().join("out.json");
    let j = json_path.to_string_lossy().into_owned();
    let args = bench_args(&["--mixed", "0.5", "--small-rate", "40", "--json", &j]);
    saltblob_bench::bench("memory://", &args, true)
        .await
        .expect("bench runs");
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(&json_path).expect("json written"))
            .expect("valid json");
    assert_eq!(json["config"]["small_rates"], serde_json::json!([40.0]));
    assert_eq!(json["config"]["small_loads"], Value::Null);
    let iso = &json["isolation"];
    let paced = iso["paced"].as_array().expect("paced list");
    assert_eq!(paced.len(), 1, "{iso}");
    let p = &paced[0];
    assert_eq!(
        (&p["fixed_rate"], &p["rate_ops_s"]),
        (&Value::Bool(true), &serde_json::json!(40.0))
    );
    // ρ is the rate against the capacity measured in the same run, and no goal is judged.
    let x_star = iso["small_capacity_ops_s"].as_f64().expect("X*");
    let rho = p["rho"].as_f64().expect("rho");
    assert!((rho - 40.0 / x_star).abs() <= rho * 1e-12, "{p}");
    assert_eq!(
        (&p["goals"], &p["met"]),
        (&Value::Null, &Value::Null),
        "{p}"
    );
    assert!(
        p["verdict"]
            .as_str()
            .is_some_and(|v| v.contains("fixed rate")),
        "{p}"
    );
    assert_eq!(
        p["under_load"]["phase"], "paced_small_under_load_rate40",
        "{p}"
    );
    // 40 ops/s for the 0.5 s of --mixed: about 20 due.
    let intended = p["under_load"]["intended"].as_u64().expect("intended");
    assert!((15..=25).contains(&intended), "{p}");
}

#[tokio::test]
async fn bad_mixed_flags_are_refused_before_anything_runs() {
    for (extra, needle) in [
        (
            &["--mixed", "1", "--large-writers", "0"][..],
            "--large-writers",
        ),
        (&["--large-writers", "3"], "--large-writers"),
        (&["--mixed", "1", "--small-load", "0"], "--small-load"),
        (&["--mixed", "1", "--small-load", "0.25,1.5"], "1.5"),
        (&["--mixed", "1", "--small-load=-0.1"], "--small-load"),
        (&["--mixed", "1", "--small-load", "NaN"], "--small-load"),
        (&["--small-load", "0.25"], "add --mixed"),
        (&["--mixed", "1", "--small-rate", "0"], "--small-rate"),
        (&["--small-rate", "100"], "add --mixed"),
        (
            &["--mixed", "1", "--small-rate", "100", "--small-load", "0.5"],
            "not both",
        ),
        (&["--mixed", "1", "--paced-samples", "0"], "--paced-samples"),
    ] {
        let args = BenchCli::try_parse_from(["bench"].iter().chain(extra))
            .expect("parses")
            .args;
        // A store that does not exist: the flags are checked before it is opened.
        let err = saltblob_bench::bench("nosuchscheme://x", &args, true)
            .await
            .expect_err("refused");
        assert!(err.to_string().contains(needle), "{extra:?}: {err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tiny_bench_on_rocksdb_probes_the_device_and_cleans_up() {
    let dir = tempfile::tempdir().expect("tempdir");
    // The scheduler's parameter configures the bench's store; the backend gets the rest.
    let url = format!(
        "rocksdb://{}?sync=false&scheduler=off",
        dir.path().join("db").display()
    );
    let json_path = dir.path().join("out.json");
    let j = json_path.to_string_lossy().into_owned();
    let args = bench_args(&["--unchunked", "--mixed", "0.5", "--json", &j]);
    saltblob_bench::bench(&url, &args, true)
        .await
        .expect("bench runs");
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(&json_path).expect("json written"))
            .expect("valid json");
    let reference = &json["reference"];
    if reference.get("error").is_some() {
        // A file system without O_DIRECT: the bench still runs and says why there is no reference.
        assert!(
            reference["error"]
                .as_str()
                .is_some_and(|e| e.contains("O_DIRECT")),
            "{reference}"
        );
        return;
    }
    check_shape(&json, &url, 1);
    assert_eq!(json["config"]["scheduler"]["enabled"], false);
    assert_eq!(reference["kind"], "device");
    assert!(reference["device"]["st_dev"].as_str().is_some());
    // Write and read at 3 request sizes and 5 depths.
    assert_eq!(reference["points"].as_array().map(Vec::len), Some(30));
    assert!(
        reference["durable_1mib_depth1_mib_s"]
            .as_f64()
            .is_some_and(|v| v > 0.0),
        "{reference}"
    );
    assert!(
        reference["extent_settings"]["io_bytes"].as_u64().is_some(),
        "{reference}"
    );
    // dd's patterns ran beside the large gets and puts, over as many bytes, and the ratios divide by them.
    for (phase, prefix, ratios) in [
        (
            "large_read",
            "dd_read",
            &[("large_read_vs_dd", "dd_read_mib_s")][..],
        ),
        (
            "large_write",
            "dd_write",
            &[
                ("large_write_vs_dd_beside", "dd_write_mib_s"),
                ("large_write_vs_durable_dd_beside", "dd_write_durable_mib_s"),
            ],
        ),
    ] {
        let phase = phase_named(&json, phase);
        let details = &phase["details"];
        assert_eq!(
            details[format!("{prefix}_bytes")],
            phase["bytes"],
            "{details}"
        );
        let mib_s = phase["throughput_mib_s"].as_f64().expect("throughput");
        for (ratio, divisor) in ratios {
            let dd_mib_s = details[*divisor].as_f64().expect(divisor);
            let ratio = ratios_named(&json, ratio);
            assert!(
                ratio["value"]
                    .as_f64()
                    .is_some_and(|v| (v - mib_s / dd_mib_s).abs() < 1e-9),
                "{ratio} {details}"
            );
        }
    }
    // The writes were synced apart.
    let details = &phase_named(&json, "large_write")["details"];
    assert!(
        details["dd_write_sync_seconds"]
            .as_f64()
            .is_some_and(|s| s > 0.0),
        "{details}"
    );
    let store = saltblob::open(&url, saltblob::StoreConfig::default())
        .await
        .expect("reopens");
    assert!(
        store
            .list("saltblob-bench/")
            .await
            .expect("lists")
            .is_empty()
    );
    // No probe file left in the data directory.
    for entry in std::fs::read_dir(dir.path().join("db")).expect("lists") {
        let name = entry.expect("entry").file_name();
        assert!(
            !name.to_string_lossy().starts_with(".saltblob-probe")
                && !name.to_string_lossy().starts_with(".saltblob-bench-dd"),
            "{name:?}"
        );
    }
}

/// `--encrypt`: each large write and read phase has a sealed twin right after it (before it with
/// `--sealed-first`), each small phase one interleaved with it, and the four cost ratios are computed from the
/// pair; without the flag they say how to get them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn encrypt_runs_a_sealed_twin_of_each_phase_and_reports_its_cost() {
    let args = bench_args(&["--encrypt", "--no-probe"]);
    let report = saltblob_bench::bench("memory://", &args, true)
        .await
        .expect("bench runs");
    let names: Vec<&str> = report.phases.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "large_write",
            "large_write_sealed",
            "large_read",
            "large_read_sealed",
            "small_write",
            "small_write_sealed",
            "small_read",
            "small_read_sealed"
        ]
    );
    for p in &report.phases {
        assert!(
            p.ops > 0 && p.errors == 0,
            "{}: {} ops, {} errors",
            p.name,
            p.ops,
            p.errors
        );
    }
    assert!(report.config.encrypt);
    for name in [
        "sealed_large_write_vs_plain",
        "sealed_large_read_vs_plain",
        "sealed_small_write_p99_vs_plain",
        "sealed_small_read_p99_vs_plain",
    ] {
        let r = report.ratios.iter().find(|r| r.name == name).expect(name);
        assert!(r.value.is_some_and(|v| v > 0.0), "{name}: {}", r.computed);
    }
    assert_eq!(report.cleanup.problems, Vec::<String>::new());
    assert!(report.cleanup.deleted_keys > 0);
    // The small phases interleave the two sides in one load: as many operations each, over the same time.
    let phase = |r: &saltblob_bench::BenchReport, name: &str| {
        r.phases
            .iter()
            .find(|p| p.name == name)
            .cloned()
            .expect(name)
    };
    for name in ["small_write", "small_read"] {
        let (plain, sealed) = (
            phase(&report, name),
            phase(&report, &format!("{name}_sealed")),
        );
        assert_eq!(
            (plain.ops, plain.seconds),
            (sealed.ops, sealed.seconds),
            "{name}"
        );
        assert!(
            plain.description.contains("interleaved"),
            "{}",
            plain.description
        );
    }

    // --sealed-first: each large phase's sealed twin runs first.
    let first = saltblob_bench::bench(
        "memory://",
        &bench_args(&["--encrypt", "--sealed-first", "--no-probe"]),
        true,
    )
    .await
    .expect("bench runs");
    let names: Vec<&str> = first.phases.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names[..4],
        [
            "large_write_sealed",
            "large_write",
            "large_read_sealed",
            "large_read"
        ]
    );
    assert!(first.config.sealed_first);

    let plain = saltblob_bench::bench("memory://", &bench_args(&["--no-probe"]), true)
        .await
        .expect("bench runs");
    let r = plain
        .ratios
        .iter()
        .find(|r| r.name == "sealed_large_write_vs_plain")
        .expect("listed");
    assert_eq!((r.value, r.computed.as_str()), (None, "run with --encrypt"));
}

#[tokio::test]
async fn a_png_plot_is_refused_before_anything_runs() {
    let bad = BenchCli::try_parse_from(["bench", "--plot", "x.png"])
        .expect("parses")
        .args;
    let err = saltblob_bench::bench("memory://", &bad, true)
        .await
        .expect_err("png refused");
    assert!(err.to_string().contains("SVG"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unchunked_over_the_largest_chunk_goes_raw_to_the_backend() {
    // 65 MiB is over the memory backend's 64 MiB chunk: saltblob would refuse it, so the value goes to the
    // backend as one raw value and the backend decides (the memory backend accepts it).
    let args = BenchCli::parse_from([
        "bench",
        "--count",
        "1",
        "--large-mb",
        "65",
        "--small-kb",
        "4096",
        "--unchunked",
        "--no-probe",
    ])
    .args;
    let report = saltblob_bench::bench("memory://", &args, true)
        .await
        .expect("bench runs");
    let w = report
        .phases
        .iter()
        .find(|p| p.name == "unchunked_write")
        .expect("ran");
    let r = report
        .phases
        .iter()
        .find(|p| p.name == "unchunked_read")
        .expect("ran");
    assert_eq!((w.ops, w.errors, r.ops, r.errors), (1, 0, 1, 0));
    assert_eq!(
        w.details.as_ref().map(|d| d["mode"].clone()),
        Some("raw_single_value".into())
    );
    assert_eq!(r.verified, Some(true));
    assert_eq!(report.cleanup.deleted_raw_values, 1);
    assert!(report.reference.is_null());
}

#[tokio::test]
async fn probe_on_a_directory_and_on_memory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path().to_string_lossy().into_owned();
    let json_path = dir.path().join("probe.json");
    let j = json_path.to_string_lossy().into_owned();
    let args = ProbeCli::parse_from([
        "probe",
        "--dir",
        &d,
        "--probe-size",
        "8MiB",
        "--probe-seconds",
        "0.1",
        "--json",
        &j,
    ])
    .args;
    match saltblob_bench::probe("memory://", &args, true).await {
        Ok(_) => {
            let json: Value =
                serde_json::from_str(&std::fs::read_to_string(&json_path).expect("json written"))
                    .expect("valid json");
            assert_eq!(json["kind"], "device");
            for field in [
                "device",
                "points",
                "knees",
                "write_mib_s",
                "read_mib_s",
                "file_bytes",
            ] {
                assert!(json.get(field).is_some(), "{field} missing");
            }
            let dev = &json["device"];
            for field in [
                "physical_block_size",
                "logical_block_size",
                "notes",
                "warnings",
            ] {
                assert!(dev.get(field).is_some(), "{field} missing");
            }
        }
        Err(e) => assert!(e.to_string().contains("O_DIRECT"), "{e}"),
    }
    let args = ProbeCli::parse_from(["probe", "--probe-size", "1MiB", "--concurrency", "2"]).args;
    let r = saltblob_bench::probe("memory://", &args, true)
        .await
        .expect("row probe");
    assert!(r.write_mib_s() > 0.0 && r.read_mib_s() > 0.0);
}

#[tokio::test]
async fn probe_accepts_the_scheduler_parameters_of_a_store_url() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("rocksdb://{}?scheduler=off", dir.path().display());
    let args =
        ProbeCli::parse_from(["probe", "--probe-size", "8MiB", "--probe-seconds", "0.1"]).args;
    match saltblob_bench::probe(&url, &args, true).await {
        Ok(report) => assert!(matches!(report, saltblob_bench::ProbeReport::Device(_))),
        Err(e) => assert!(e.to_string().contains("O_DIRECT"), "{e}"),
    }
}
