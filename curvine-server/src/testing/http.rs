//! A minimal HTTP/1.1 client for tests of the web ports (one request per connection),
//! and a reader of the Prometheus text format.

use std::net::SocketAddr;
use std::time::Duration;

use curvine_common::{FsError, FsResult};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One HTTP response: status, headers (names lower-cased) and body.
#[derive(Debug)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl HttpResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// `GET path` with extra header lines (`"Authorization: Bearer x"`).
pub async fn get(addr: SocketAddr, path: &str, headers: &[&str]) -> FsResult<HttpResponse> {
    request(addr, "GET", path, headers, b"").await
}

/// Send one request and read the whole response (the server closes the connection).
pub async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[&str],
    body: &[u8],
) -> FsResult<HttpResponse> {
    let io = |e| FsError::io_ctx(format!("http {method} {addr}{path}"), e);
    let mut s = tokio::time::timeout(Duration::from_secs(10), TcpStream::connect(addr))
        .await
        .map_err(|_| FsError::Timeout {
            message: format!("connect to {addr}"),
        })?
        .map_err(io)?;
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for h in headers {
        head.push_str(h);
        head.push_str("\r\n");
    }
    if !body.is_empty() || method == "POST" {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).await.map_err(io)?;
    s.write_all(body).await.map_err(io)?;
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut raw))
        .await
        .map_err(|_| FsError::Timeout {
            message: format!("response from {addr}{path}"),
        })?
        .map_err(io)?;
    parse(&raw)
}

fn parse(raw: &[u8]) -> FsResult<HttpResponse> {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| FsError::protocol("an HTTP response without a header end"))?;
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| FsError::protocol("an HTTP response without a status"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"));
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_string()
    };
    Ok(HttpResponse {
        status,
        headers,
        body,
    })
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// The sum of the samples of metric `name` whose labels include every `(label, value)`
/// of `with`, from Prometheus text.
pub fn metric_sum(text: &str, name: &str, with: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (n, labels) = match series.split_once('{') {
                Some((n, rest)) => (n, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            if n != name {
                return None;
            }
            let ok = with
                .iter()
                .all(|(k, v)| labels.split(',').any(|kv| kv == format!("{k}=\"{v}\"")));
            ok.then(|| value.parse::<f64>().ok()).flatten()
        })
        .sum()
}

/// Every metric name with a HELP line in Prometheus text.
pub fn metric_names(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# HELP "))
        .filter_map(|l| l.split(' ').next())
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_samples_by_label() {
        let t = "# HELP x_total X.\n# TYPE x_total counter\nx_total{a=\"1\",b=\"r\"} 3\n\
                 x_total{a=\"2\",b=\"r\"} 4\ny 9\n";
        assert_eq!(metric_sum(t, "x_total", &[]), 7.0);
        assert_eq!(metric_sum(t, "x_total", &[("a", "2")]), 4.0);
        assert_eq!(metric_sum(t, "y", &[]), 9.0);
        assert_eq!(metric_names(t), vec!["x_total".to_string()]);
    }

    #[test]
    fn reads_chunked_bodies() {
        let r = parse(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
            .unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(r.body, "abcde");
    }
}
