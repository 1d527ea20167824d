//! `locklab report`, end to end.

mod common;
use common::*;

/// `report --from` draws a page from any JSON the lab wrote: a bench run and a reproduce run
/// together; per workload configuration the summary (ours / the best peer) and four plots (scaling,
/// latency CDF, idle, hand-over), the reproduction's table and verdict; bad input is one clear line.
#[test]
fn report_draws_any_runs_into_one_page() {
    let dir = tempfile::tempdir().unwrap();
    let bench = dir.path().join("bench.json");
    let repro = dir.path().join("repro.json");
    let page = dir.path().join("page.html");
    let (code, _, err) = run(&[
        "bench",
        "--workload",
        "rw",
        "--locks",
        "rwsem,std-rwlock",
        "--threads",
        "1,2",
        "--duration-ms",
        "40",
        "--repeats",
        "1",
        "--quiet",
        "--json",
        bench.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = run(&[
        "reproduce",
        "000",
        "--quick",
        "--json",
        repro.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = run(&[
        "report",
        "--from",
        bench.to_str().unwrap(),
        "--from",
        repro.to_str().unwrap(),
        "--out",
        page.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.trim_end().ends_with("page.html"),
        "the path is printed last: {out}"
    );
    let html = std::fs::read_to_string(&page).unwrap();
    assert_eq!(
        html.matches("<figure data-plot=").count(),
        5,
        "one rw configuration: the summary (ours and peers ran) and 4 plots"
    );
    assert!(html.contains("<p data-plots=\"5\">"));
    for id in ["summary", "scaling", "latency", "idle", "handover"] {
        assert!(html.contains(&format!("-{id}\"")), "{id}");
    }
    assert!(html.contains("data-seed=\"000\"") && html.contains("SMP, files_lock rwlock"));
    assert_eq!(
        html.matches("<h2 id=\"run").count(),
        2,
        "one section per run"
    );

    let (code, _, err) = run(&["report", "--from", "/nonexistent/run.json"]);
    assert_eq!(code, 1);
    assert!(err.contains("cannot read /nonexistent/run.json"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    std::fs::write(dir.path().join("bad.json"), "{\"x\": 1}").unwrap();
    let bad = dir.path().join("bad.json");
    let (code, _, err) = run(&["report", "--from", bad.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(err.contains("is not a locklab --json report"), "{err}");
}
