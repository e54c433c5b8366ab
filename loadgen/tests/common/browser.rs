//! Opening a report in headless Chromium (Debian's `chromium`, installed by
//! scripts/test.sh): the DOM once its scripts ran, and screenshots.

use std::path::Path;
use std::process::Command;

/// Chromium, headless, with a fresh profile and nothing fetched of its own.
fn chromium(profile: &Path) -> Command {
    let mut cmd = Command::new("chromium");
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        // Runs the page's timers and load handlers before the dump or the shot.
        "--virtual-time-budget=10000",
    ])
    .arg(format!("--user-data-dir={}", profile.display()));
    cmd
}

fn url(page: &Path, fragment: &str) -> String {
    let page = page.canonicalize().unwrap();
    format!("file://{}{fragment}", page.display())
}

/// The DOM of `page` (with `fragment`, such as `#cursor=0.6`) after its scripts ran.
pub fn dom(page: &Path, fragment: &str) -> String {
    let profile = tempfile::tempdir().unwrap();
    let out = chromium(profile.path())
        .arg("--dump-dom")
        .arg(url(page, fragment))
        .output()
        .expect("chromium runs (scripts/setup-debian.sh --tests installs it)");
    assert!(
        out.status.success(),
        "chromium: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A screenshot of `page` in a window `width` x `height`, as PNG bytes.
pub fn screenshot(page: &Path, fragment: &str, width: u32, height: u32, png: &Path) -> Vec<u8> {
    let profile = tempfile::tempdir().unwrap();
    let out = chromium(profile.path())
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("--window-size={width},{height}"))
        .arg(url(page, fragment))
        .output()
        .expect("chromium runs (scripts/setup-debian.sh --tests installs it)");
    assert!(
        out.status.success(),
        "chromium: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read(png).unwrap()
}

/// The number the page's script wrote into `data-NAME` on `<body>`.
pub fn body_count(dom: &str, name: &str) -> usize {
    let body = &dom[dom.find("<body").expect("a body")..];
    let body = &body[..body.find('>').unwrap()];
    let key = format!("data-{name}=\"");
    let start = body
        .find(&key)
        .unwrap_or_else(|| panic!("no data-{name} on the body: {body}"))
        + key.len();
    body[start..start + body[start..].find('"').unwrap()]
        .parse()
        .unwrap()
}

/// What the browser drew in a report: charts placed, charts whose series
/// show on their canvas, and legends that show values at the cursor.
#[derive(Debug, PartialEq)]
pub struct Drawn {
    pub places: usize,
    pub charts: usize,
    pub drawn: usize,
    pub legends_filled: usize,
}

/// Opens `page` and reads what it drew.
pub fn drawn(page: &Path, fragment: &str) -> Drawn {
    let html = std::fs::read_to_string(page).unwrap();
    let dom = dom(page, fragment);
    Drawn {
        places: html.matches("class=\"chart\" data-chart=").count(),
        charts: body_count(&dom, "charts"),
        drawn: body_count(&dom, "charts-drawn"),
        legends_filled: body_count(&dom, "legends-filled"),
    }
}
