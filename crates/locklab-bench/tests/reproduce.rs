//! `locklab reproduce`: each seed, end to end.

mod common;
use common::*;

/// `reproduce 004` prints the seed's table with its figures beside ours and a verdict
/// computed from them, and writes it all as JSON; a seed not built yet is one clear line.
#[test]
fn reproduce_004_prints_the_seeds_table_and_a_verdict() {
    let (code, out, err) = run(&["reproduce", "004", "--quick", "--json", "-"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let r = &v["reproductions"][0];
    assert_eq!(r["seed"], "004");
    let rows = r["figures"]["rows"].as_array().unwrap();
    assert_eq!(rows[0]["procs"], 1);
    assert_eq!(
        rows[0]["seed"][0], 595238.0,
        "the seed's tput-base at 1 proc"
    );
    for row in rows {
        let arms: Vec<&str> = row["ours"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a[0].as_str().unwrap())
            .collect();
        assert!(arms.starts_with(&["base", "rcu"]), "{row}");
        for a in row["ours"].as_array().unwrap() {
            assert!(a[1].as_f64().unwrap() > 0.0, "{row}");
        }
    }
    let verdict = r["verdict"].as_str().unwrap();
    assert_eq!(
        verdict.starts_with("reproduced"),
        r["reproduced"].as_bool().unwrap(),
        "{verdict}"
    );
    assert!(verdict.contains("rcu/base x"), "{verdict}");
    assert!(
        v["results"].as_array().unwrap().len() >= 4,
        "the lab rows behind it"
    );

    let (code, out, _) = run(&["reproduce", "004", "--quick"]);
    assert_eq!(code, 0);
    assert!(out.contains("procs") && out.contains("tput-base") && out.contains("tput-rcu"));
    assert!(out.contains("595,238 (x1.00)"), "the seed's figures: {out}");
    assert!(out.contains("verdict: "), "{out}");

    let (code, _, err) = run(&["reproduce", "005"]);
    assert_eq!(code, 2);
    assert!(err.contains("unknown seed '005'"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

/// Runs `reproduce SEED --quick --json -` and checks what every reproduction carries: the seed, a
/// table, and a verdict that agrees with its `reproduced` flag and names the seed's figures.
fn reproduce_json(seed: &str) -> serde_json::Value {
    let (code, out, err) = run(&["reproduce", seed, "--quick", "--json", "-"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let r = v["reproductions"][0].clone();
    assert_eq!(r["seed"], seed);
    let verdict = r["verdict"].as_str().unwrap();
    assert_eq!(
        verdict.starts_with("reproduced"),
        r["reproduced"].as_bool().unwrap(),
        "{verdict}"
    );
    assert!(
        r["table"]
            .as_str()
            .unwrap()
            .starts_with(&format!("seed {seed}: "))
    );
    r
}

/// Seed 000: four builds of the write path, UP the cheapest (it has no locked instruction:
/// a model whose UP arm were not cheaper would be measuring something else), and the dd reference.
#[test]
fn reproduce_000_times_the_write_path_builds() {
    let r = reproduce_json("000");
    let arms = r["figures"]["arms"].as_array().unwrap();
    let ns: Vec<f64> = arms
        .iter()
        .map(|a| a["ns_per_write"].as_f64().unwrap())
        .collect();
    assert_eq!(ns.len(), 4);
    assert_eq!(arms[0]["arm"], "UP");
    assert!(ns[0] > 0.1 && ns.iter().all(|&n| n >= ns[0]), "{ns:?}");
    assert_eq!(r["figures"]["seed"]["smp_rwlock"][2], 2.445);
    let dd = &r["figures"]["dd"];
    assert_eq!(dd["count"], 256 * 1024, "{dd}");
    assert!(dd["total_s"].as_f64().unwrap() > 0.0, "{dd}");
    assert!(
        r["verdict"]
            .as_str()
            .unwrap()
            .contains("rwlock -> spinlock")
    );
}

/// Seed 001: three workloads x six node locks; MB/s-equivalent is ops x 4 KiB; the
/// non-spinning rwsem's writers sleep, the others' do not all.
#[test]
fn reproduce_001_runs_the_btree_workloads() {
    let r = reproduce_json("001");
    let rows = r["figures"]["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 18);
    for w in ["dbench", "creates", "stat-hammer"] {
        assert_eq!(rows.iter().filter(|x| x["workload"] == w).count(), 6, "{w}");
    }
    for x in rows {
        let ops = x["ops_per_sec"].as_f64().unwrap();
        assert!(ops > 0.0, "{x}");
        assert!(
            (x["mb_per_sec"].as_f64().unwrap() - ops * 4096.0 / 1e6).abs() < 1e-6 * ops,
            "{x}"
        );
        assert!(x["cpu_s_per_mop"].as_f64().unwrap() > 0.0, "{x}");
    }
    assert_eq!(r["figures"]["seed"]["dbench_mb_s"]["rwsem"], 200.0);
}

/// Seed 003: the directory model at the CPU count and four times it; idle shares are
/// percentages, and the seed's 90% / 15-20% are beside ours.
#[test]
fn reproduce_003_reports_idle_beside_throughput() {
    let r = reproduce_json("003");
    let rows = r["figures"]["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 10);
    let counts: std::collections::BTreeSet<u64> = rows
        .iter()
        .map(|x| x["threads"].as_u64().unwrap())
        .collect();
    assert_eq!(counts.len(), 2);
    let (lo, hi) = (*counts.first().unwrap(), *counts.last().unwrap());
    assert_eq!(hi, 4 * lo);
    for x in rows {
        let idle = x["idle_pct"].as_f64().unwrap();
        assert!((0.0..=100.0).contains(&idle), "{x}");
        assert!(x["ops_per_sec"].as_f64().unwrap() > 0.0, "{x}");
    }
    assert_eq!(r["figures"]["seed"]["rwsem_idle_pct"], 90.0);
    let table = r["table"].as_str().unwrap();
    assert!(
        table.contains("rwsem-no-reader-spin") && table.contains("15-20"),
        "{table}"
    );
}

/// `reproduce 002` measures five arms at 1 and 2 threads and derives each lock's share of a
/// stat() from them; the JSON's shares are the subtractions of its own arms.
#[test]
fn reproduce_002_measures_shares_by_subtraction() {
    let (code, out, err) = run(&["reproduce", "002", "--quick", "--json", "-"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let r = &v["reproductions"][0];
    assert_eq!(r["seed"], "002");
    let arms = r["figures"]["arms"].as_array().unwrap();
    assert_eq!(arms.len(), 5);
    let ns = |i: usize, t: usize| arms[i]["ns_per_op"][t].as_f64().unwrap();
    for a in arms {
        for t in 0..2 {
            let v = a["ns_per_op"][t].as_f64().unwrap();
            assert!(v > 1.0 && v < 100_000.0, "{a}");
        }
    }
    let sh = &r["figures"]["shares"];
    let brlock_1 = 100.0 * (ns(1, 0) - ns(3, 0)) / ns(1, 0);
    assert!(
        (sh["brlock_1"].as_f64().unwrap() - brlock_1).abs() < 1e-6,
        "{sh}"
    );
    let lockref_2 = 100.0 * (ns(1, 1) - ns(4, 1)) / ns(1, 1);
    assert!(
        (sh["lockref_2"].as_f64().unwrap() - lockref_2).abs() < 1e-6,
        "{sh}"
    );
    assert_eq!(
        r["verdict"].as_str().unwrap().starts_with("reproduced"),
        r["reproduced"].as_bool().unwrap()
    );
    assert!(r["table"].as_str().unwrap().contains("brlock + lockref"));
}
