//! `--proxy` and the `[[proxy]]` tables of the settings file: a route in
//! the flag form `PREFIX=URL[,URL...]`, or a table with every setting of
//! [`ProxyRoute`]. The words of each value are `mpm-proxy`'s (its
//! `FromStr`s); this file only knows the file's keys.

use std::time::Duration;

use mpm_core::Seconds;
use mpm_proxy::{
    ActiveHealth, Cidr, ClientCert, CookieFlag, CookieFlags, CookieRule, ProxyRoute, Redirect,
    SetHeader, UpstreamSpec, MAX_COUNT, MAX_WEIGHT,
};

use super::values::{did_you_mean, Bounds, OnOff, Value};

/// The keys of a `[[proxy]]` table, with what each takes, in the order
/// the docs list them.
pub(crate) const TABLE_KEYS: &[(&str, &str)] = &[
    ("prefix", "the path prefix, starting with `/` (required)"),
    (
        "upstreams",
        "URLs (`\"http://10.0.0.2:8080/v1/\"`), or tables `{ url, weight = 1, max_fails = 1, \
         fail_timeout = \"10s\", backup = false, max_conns = 0 }` (required; a backup is taken \
         only while no other may be; `max_conns`: the most requests in flight to it from each \
         serving process, 0 for no limit)",
    ),
    (
        "balance",
        "`round-robin` (weighted, smooth; the default), `least-conn`, `hash:client`, \
         `hash:header:NAME`",
    ),
    ("connect_timeout", "a duration (60s)"),
    ("read_timeout", "a duration (60s)"),
    ("send_timeout", "a duration (60s)"),
    (
        "next_upstream",
        "on or off (on): try the next upstream for an idempotent request after a connect \
         error or a close before any response byte",
    ),
    (
        "next_upstream_tries",
        "the most upstreams one request tries (0: all)",
    ),
    (
        "buffering",
        "`off` (stream; the default) or `on` (read up to 1 MiB of the answer before sending \
         it, freeing the upstream early); `text/event-stream` and `X-Accel-Buffering` decide \
         over it",
    ),
    (
        "health_interval",
        "a duration: active checks every this long (any health_ key turns them on; 5s)",
    ),
    ("health_path", "the path checked (`/`)"),
    (
        "health_status",
        "the statuses that pass: `200-399` (the default) or a list `200,204`",
    ),
    (
        "health_rise",
        "passes in a row that bring an upstream back (2)",
    ),
    ("health_fall", "failures in a row that take it down (3)"),
    ("health_timeout", "how long one check may take (2s)"),
    (
        "forwarded",
        "`x-forwarded` (the default), `forwarded` (RFC 7239) or `off`",
    ),
    (
        "trusted_proxies",
        "address ranges (`[\"10.0.0.0/8\", \"::1\"]`) whose X-Forwarded-* or Forwarded fields \
         are kept and appended to",
    ),
    (
        "host",
        "the `Host` sent: `upstream` (the URL's host:port, nginx's default), `pass` (the \
         client's), or a value",
    ),
    (
        "ca_file",
        "a PEM file of the certificate authorities `https://` upstreams are verified against \
         (default: the Mozilla roots); verification is never off",
    ),
    (
        "client_cert",
        "a PEM file of the certificate chain presented to `https://` upstreams that ask for one \
         (mutual TLS, nginx's `proxy_ssl_certificate`); with `client_key`",
    ),
    ("client_key", "the PEM file of `client_cert`'s private key"),
    (
        "redirect",
        "how `Location` and `Refresh` in answers are rewritten (nginx's `proxy_redirect`): \
         `default` (an upstream's URL becomes the prefix; the default), `off`, or a list of \
         `{ from = \"http://10.0.0.2:8080/\", to = \"/\" }` and `\"default\"`, the first that \
         matches applied",
    ),
    (
        "intercept_errors",
        "answers of 300 or more replaced by the server's `--error-page` for their status, \
         where one is configured (nginx's `proxy_intercept_errors`): `off` (the default) or `on`",
    ),
    (
        "accel_redirect",
        "an upstream's `X-Accel-Redirect: /path` followed: the server answers a `GET` of that \
         path (with the client's fields) instead, keeping the upstream's `Set-Cookie`, \
         `Content-Disposition`, `Cache-Control` and `Expires`; `on` (the default, as nginx) or \
         `off` (nginx's `proxy_ignore_headers X-Accel-Redirect`: the field dropped, the answer \
         passed). `--internal` paths are served only so",
    ),
    (
        "cookie_domain",
        "how the `Domain` of `Set-Cookie` in answers is rewritten (nginx's \
         `proxy_cookie_domain`): `off` (the default) or a list of \
         `{ from = \"backend.internal\", to = \"example.org\" }`, a domain matched whole, \
         letter case aside, the first that matches applied",
    ),
    (
        "cookie_path",
        "how the `Path` of `Set-Cookie` in answers is rewritten (nginx's `proxy_cookie_path`): \
         `off` (the default) or a list of `{ from = \"/v1/\", to = \"/api/\" }`, the beginning \
         of a path replaced, the first that matches applied",
    ),
    (
        "cookie_flags",
        "flags of `Set-Cookie` in answers added or removed (nginx's `proxy_cookie_flags`): `off` \
         (the default) or a list of `{ cookie = \"sid\", flags = [\"secure\", \"httponly\", \
         \"samesite=lax\"] }`, `cookie = \"*\"` for every cookie, the first that names a \
         cookie applied; flags secure, httponly, samesite=strict|lax|none, nosecure, nohttponly, \
         nosamesite",
    ),
    (
        "set_header",
        "fields set on every forwarded request, replacing the client's (nginx's \
         `proxy_set_header`): `{ \"X-Real-IP\" = \"$remote_addr\" }`; the variables are \
         `$remote_addr`, `$scheme`, `$host`; an empty value removes the field",
    ),
    (
        "hide_header",
        "fields of the upstream's answers never passed on (nginx's `proxy_hide_header`): \
         `[\"X-Powered-By\"]`",
    ),
];

impl Value for ProxyRoute {
    fn parse(word: &str) -> Result<Self, String> {
        ProxyRoute::from_flag(word).map_err(|e| e.to_string())
    }

    /// A string in the flag form, or a `[[proxy]]` table.
    fn from_toml(value: &toml::Value) -> Result<Self, String> {
        match value {
            toml::Value::String(s) => Self::parse(s),
            toml::Value::Table(t) => route_of_table(t),
            other => Err(format!(
                "expected a [[proxy]] table or \"PREFIX=URL[,URL...]\", found {}",
                other.type_str()
            )),
        }
    }

    fn show(&self) -> String {
        self.to_flag()
    }
}

/// A route from a `[[proxy]]` table: the prefix and upstreams first, then
/// every other key over the defaults, then every bound checked.
fn route_of_table(table: &toml::Table) -> Result<ProxyRoute, String> {
    // nginx's spelling (`max_fails`) or the file's (`max-fails`): one key.
    let t: toml::Table = table
        .iter()
        .map(|(k, v)| (k.replace('-', "_"), v.clone()))
        .collect();
    let t = &t;
    let keys: Vec<&str> = TABLE_KEYS.iter().map(|(k, _)| *k).collect();
    if let Some(bad) = t.keys().find(|k| !keys.contains(&k.as_str())) {
        let guess = did_you_mean(bad, keys.iter().copied())
            .map(|g| format!(" (did you mean `{g}`?)"))
            .unwrap_or_default();
        return Err(format!(
            "[[proxy]]: unknown key `{bad}`{guess}; the keys are {}",
            keys.join(", ")
        ));
    }
    let prefix = match t.get("prefix") {
        Some(toml::Value::String(p)) => p.clone(),
        Some(other) => {
            return Err(format!(
                "[[proxy]] prefix: expected a string, found {}",
                other.type_str()
            ))
        }
        None => return Err("[[proxy]]: no `prefix` (e.g. prefix = \"/api/\")".into()),
    };
    let at = |key: &str, e: String| format!("[[proxy]] {prefix}: {key}: {e}");
    let upstreams = match t.get("upstreams") {
        Some(toml::Value::Array(items)) if !items.is_empty() => items
            .iter()
            .map(upstream_of)
            .collect::<Result<Vec<_>, String>>()
            .map_err(|e| at("upstreams", e))?,
        Some(toml::Value::Array(_)) | None => {
            return Err(format!(
                "[[proxy]] {prefix}: no upstreams (e.g. upstreams = [\"http://127.0.0.1:8080\"])"
            ))
        }
        Some(other) => {
            return Err(at(
                "upstreams",
                format!("expected an array, found {}", other.type_str()),
            ))
        }
    };
    let mut route = ProxyRoute::new(&prefix, &["http://placeholder"]).map_err(|e| e.to_string())?;
    route.upstreams = upstreams;
    let word = |key: &str| -> Result<Option<String>, String> {
        match t.get(key) {
            None => Ok(None),
            Some(toml::Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(at(
                key,
                format!("expected a string, found {}", other.type_str()),
            )),
        }
    };
    let duration = |key: &str| -> Result<Option<Duration>, String> {
        t.get(key)
            .map(|v| Seconds::from_toml(v).map(|s| s.0).map_err(|e| at(key, e)))
            .transpose()
    };
    // Each count's complaint names the values it takes.
    let number = |key: &str, least: u128| -> Result<Option<u32>, String> {
        let bounds = Bounds::Between(least, MAX_COUNT.into());
        t.get(key)
            .map(|v| u32::from_toml_within(v, bounds).map_err(|e| at(key, e)))
            .transpose()
    };
    // mpm-proxy's own messages name the key already.
    let parsed = |_key: &str, e: mpm_proxy::Error| format!("[[proxy]] {prefix}: {e}");
    if let Some(w) = word("balance")? {
        route.balance = w.parse().map_err(|e| parsed("balance", e))?;
    }
    if let Some(d) = duration("connect_timeout")? {
        route.connect_timeout = d;
    }
    if let Some(d) = duration("read_timeout")? {
        route.read_timeout = d;
    }
    if let Some(d) = duration("send_timeout")? {
        route.send_timeout = d;
    }
    if let Some(v) = t.get("next_upstream") {
        route.next_upstream = OnOff::from_toml(v).map_err(|e| at("next_upstream", e))?.0;
    }
    if let Some(n) = number("next_upstream_tries", 0)? {
        route.next_upstream_tries = n;
    }
    if let Some(w) = word("buffering")? {
        route.buffering = w.parse().map_err(|e| parsed("buffering", e))?;
    }
    if t.keys().any(|k| k.starts_with("health_")) {
        let mut h = ActiveHealth::default();
        if let Some(d) = duration("health_interval")? {
            h.interval = d;
        }
        if let Some(p) = word("health_path")? {
            h.path = p;
        }
        if let Some(v) = t.get("health_status") {
            let text = match v {
                toml::Value::Integer(n) => n.to_string(),
                toml::Value::String(s) => s.clone(),
                other => {
                    return Err(at(
                        "health_status",
                        format!("expected a string, found {}", other.type_str()),
                    ))
                }
            };
            h.expect_status = text.parse().map_err(|e| parsed("health_status", e))?;
        }
        if let Some(n) = number("health_rise", 1)? {
            h.rise = n;
        }
        if let Some(n) = number("health_fall", 1)? {
            h.fall = n;
        }
        if let Some(d) = duration("health_timeout")? {
            h.timeout = d;
        }
        route.health = Some(h);
    }
    if let Some(w) = word("forwarded")? {
        route.forwarded = w.parse().map_err(|e| parsed("forwarded", e))?;
    }
    if let Some(v) = t.get("trusted_proxies") {
        let words: Vec<String> = match v {
            toml::Value::Array(_) => {
                Vec::<String>::from_toml(v).map_err(|e| at("trusted_proxies", e))?
            }
            toml::Value::String(s) => s.split(',').map(str::to_string).collect(),
            other => {
                return Err(at(
                    "trusted_proxies",
                    format!("expected an array, found {}", other.type_str()),
                ))
            }
        };
        route.trusted_proxies = words
            .iter()
            .map(|w| w.parse::<Cidr>())
            .collect::<Result<_, _>>()
            .map_err(|e| at("trusted_proxies", e))?;
    }
    if let Some(w) = word("host")? {
        route.host = w.parse().map_err(|e| parsed("host", e))?;
    }
    if let Some(w) = word("ca_file")? {
        route.ca_file = Some(std::path::PathBuf::from(w));
    }
    match (word("client_cert")?, word("client_key")?) {
        (None, None) => {}
        (Some(cert), Some(key)) => {
            route.client_cert = Some(ClientCert {
                cert: cert.into(),
                key: key.into(),
            });
        }
        (Some(_), None) => return Err(at("client_cert", "needs client_key too".into())),
        (None, Some(_)) => return Err(at("client_key", "needs client_cert too".into())),
    }
    if let Some(v) = t.get("redirect") {
        route.redirect = redirects_of(v).map_err(|e| at("redirect", e))?;
    }
    if let Some(v) = t.get("intercept_errors") {
        route.intercept_errors = OnOff::from_toml(v)
            .map_err(|e| at("intercept_errors", e))?
            .0;
    }
    if let Some(v) = t.get("accel_redirect") {
        route.accel_redirect = OnOff::from_toml(v).map_err(|e| at("accel_redirect", e))?.0;
    }
    if let Some(v) = t.get("cookie_domain") {
        route.cookie_domain =
            cookie_rules_of(v, CookieRule::domain, "backend.internal", "example.org")
                .map_err(|e| at("cookie_domain", e))?;
    }
    if let Some(v) = t.get("cookie_flags") {
        route.cookie_flags = cookie_flags_of(v).map_err(|e| at("cookie_flags", e))?;
    }
    if let Some(v) = t.get("cookie_path") {
        route.cookie_path = cookie_rules_of(v, CookieRule::path, "/v1/", "/api/")
            .map_err(|e| at("cookie_path", e))?;
    }
    match t.get("set_header") {
        None => {}
        Some(toml::Value::Table(fields)) => {
            for (name, value) in fields {
                let toml::Value::String(value) = value else {
                    return Err(at(
                        "set_header",
                        format!("{name}: expected a string, found {}", value.type_str()),
                    ));
                };
                route
                    .set_header
                    .push(SetHeader::new(name, value).map_err(|e| parsed("set_header", e))?);
            }
        }
        Some(other) => {
            return Err(at(
                "set_header",
                format!(
                    "expected a table {{ \"X-Real-IP\" = \"$remote_addr\" }}, found {}",
                    other.type_str()
                ),
            ))
        }
    }
    if let Some(v) = t.get("hide_header") {
        route.hide_header = Vec::<String>::from_toml(v).map_err(|e| at("hide_header", e))?;
    }
    // Active checks of https:// upstreams verify as the requests do.
    if let Some(h) = &mut route.health {
        h.ca_file.clone_from(&route.ca_file);
        h.client_cert.clone_from(&route.client_cert);
    }
    route
        .check()
        .map_err(|e| format!("[[proxy]] {prefix}: {e}"))?;
    Ok(route)
}

/// A route's `redirect`: `"default"`, `"off"`, or a list of `"default"`
/// and `{ from, to }` tables.
fn redirects_of(v: &toml::Value) -> Result<Vec<Redirect>, String> {
    let one = |v: &toml::Value| -> Result<Redirect, String> {
        match v {
            toml::Value::String(w) if w == "off" => {
                Err("`off` stands alone (redirect = \"off\"), not in a list".into())
            }
            toml::Value::String(w) => w.parse().map_err(|e: mpm_proxy::Error| e.to_string()),
            toml::Value::Table(t) => {
                if let Some(bad) = t.keys().find(|k| !["from", "to"].contains(&k.as_str())) {
                    return Err(format!("unknown key `{bad}`; a rule's keys are from, to"));
                }
                match (t.get("from"), t.get("to")) {
                    (Some(toml::Value::String(from)), Some(toml::Value::String(to))) => {
                        Redirect::replace(from, to).map_err(|e| e.to_string())
                    }
                    _ => Err("a rule needs `from` and `to` strings, e.g. \
                              { from = \"http://10.0.0.2:8080/\", to = \"/\" }"
                        .into()),
                }
            }
            other => Err(format!(
                "expected \"default\" or a {{ from, to }} table, found {}",
                other.type_str()
            )),
        }
    };
    match v {
        toml::Value::String(w) if w == "off" => Ok(Vec::new()),
        toml::Value::String(_) => Ok(vec![one(v)?]),
        toml::Value::Array(items) => items.iter().map(one).collect(),
        other => Err(format!(
            "expected \"default\", \"off\" or a list of rules, found {}",
            other.type_str()
        )),
    }
}

/// A route's `cookie_domain` or `cookie_path`: `"off"`, or a list of
/// `{ from, to }` tables made into rules by `make` (`eg_from`, `eg_to`: an
/// example for the complaint).
fn cookie_rules_of(
    v: &toml::Value,
    make: fn(&str, &str) -> mpm_proxy::Result<CookieRule>,
    eg_from: &str,
    eg_to: &str,
) -> Result<Vec<CookieRule>, String> {
    let shape = format!("\"off\" or a list of {{ from = \"{eg_from}\", to = \"{eg_to}\" }}");
    let one = |v: &toml::Value| -> Result<CookieRule, String> {
        let toml::Value::Table(t) = v else {
            return Err(format!(
                "expected a {{ from, to }} table, found {}",
                v.type_str()
            ));
        };
        if let Some(bad) = t.keys().find(|k| !["from", "to"].contains(&k.as_str())) {
            return Err(format!("unknown key `{bad}`; a rule's keys are from, to"));
        }
        match (t.get("from"), t.get("to")) {
            (Some(toml::Value::String(from)), Some(toml::Value::String(to))) => {
                make(from, to).map_err(|e| e.to_string())
            }
            _ => Err(format!("a rule needs `from` and `to` strings: {shape}")),
        }
    };
    match v {
        toml::Value::String(w) if w == "off" => Ok(Vec::new()),
        toml::Value::Array(items) => items.iter().map(one).collect(),
        other => Err(format!("expected {shape}, found {}", other.type_str())),
    }
}

/// A route's `cookie_flags`: `"off"`, or a list of `{ cookie, flags }`.
fn cookie_flags_of(v: &toml::Value) -> Result<Vec<CookieFlags>, String> {
    let shape = "\"off\" or a list of { cookie = \"sid\", flags = [\"secure\", \"httponly\"] }";
    let one = |v: &toml::Value| -> Result<CookieFlags, String> {
        let toml::Value::Table(t) = v else {
            return Err(format!("expected {shape}, found {}", v.type_str()));
        };
        if let Some(bad) = t
            .keys()
            .find(|k| !["cookie", "flags"].contains(&k.as_str()))
        {
            return Err(format!(
                "unknown key `{bad}`; an entry's keys are cookie, flags"
            ));
        }
        let (Some(toml::Value::String(cookie)), Some(toml::Value::Array(flags))) =
            (t.get("cookie"), t.get("flags"))
        else {
            return Err(format!(
                "an entry needs a `cookie` string and a `flags` list: {shape}"
            ));
        };
        let flags = flags
            .iter()
            .map(|f| match f {
                toml::Value::String(f) => f.parse::<CookieFlag>().map_err(|e| e.to_string()),
                other => Err(format!("a flag is a string, found {}", other.type_str())),
            })
            .collect::<Result<Vec<_>, String>>()?;
        CookieFlags::new(cookie, flags).map_err(|e| e.to_string())
    };
    match v {
        toml::Value::String(w) if w == "off" => Ok(Vec::new()),
        toml::Value::Array(items) => items.iter().map(one).collect(),
        other => Err(format!("expected {shape}, found {}", other.type_str())),
    }
}

/// One of `upstreams`: a URL, or `{ url, weight, max_fails, fail_timeout,
/// backup, max_conns }`.
fn upstream_of(v: &toml::Value) -> Result<UpstreamSpec, String> {
    match v {
        toml::Value::String(url) => UpstreamSpec::new(url).map_err(|e| e.to_string()),
        toml::Value::Table(t) => {
            const KEYS: [&str; 6] = [
                "url",
                "weight",
                "max_fails",
                "fail_timeout",
                "backup",
                "max_conns",
            ];
            let t: toml::Table = t
                .iter()
                .map(|(k, v)| (k.replace('-', "_"), v.clone()))
                .collect();
            let t = &t;
            if let Some(bad) = t.keys().find(|k| !KEYS.contains(&k.as_str())) {
                return Err(format!(
                    "unknown key `{bad}`; an upstream's keys are {}",
                    KEYS.join(", ")
                ));
            }
            let Some(toml::Value::String(url)) = t.get("url") else {
                return Err("an upstream table needs a `url` string".into());
            };
            let mut u = UpstreamSpec::new(url).map_err(|e| e.to_string())?;
            if let Some(w) = t.get("weight") {
                u.weight = u32::from_toml_within(w, Bounds::Between(1, MAX_WEIGHT.into()))
                    .map_err(|e| format!("{url}: weight: {e}"))?;
            }
            if let Some(m) = t.get("max_fails") {
                u.max_fails = u32::from_toml_within(m, Bounds::at_most(MAX_COUNT.into()))
                    .map_err(|e| format!("{url}: max_fails: {e}"))?;
            }
            if let Some(m) = t.get("max_conns") {
                u.max_conns = u32::from_toml_within(m, Bounds::at_most(MAX_COUNT.into()))
                    .map_err(|e| format!("{url}: max_conns: {e}"))?;
            }
            if let Some(d) = t.get("fail_timeout") {
                u.fail_timeout = Seconds::from_toml(d)
                    .map_err(|e| format!("{url}: fail_timeout: {e}"))?
                    .0;
            }
            if let Some(b) = t.get("backup") {
                u.backup = OnOff::from_toml(b)
                    .map_err(|e| format!("{url}: backup: {e}"))?
                    .0;
            }
            u.check().map_err(|e| e.to_string())?;
            Ok(u)
        }
        other => Err(format!(
            "expected a URL or a table, found {}",
            other.type_str()
        )),
    }
}

#[cfg(test)]
mod tests {
    use mpm_proxy::{Balance, Buffering, ForwardedStyle, HashKey, HostMode, StatusMatch};

    use super::*;
    use crate::settings::{Config, ConfigLayer};

    fn routes(toml_text: &str) -> Result<Vec<ProxyRoute>, String> {
        let layer = ConfigLayer::from_toml(toml_text)?;
        Config::resolve(layer)
            .map(|c| c.proxy)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_proxy_table_sets_every_key() {
        let r = routes(
            r#"
            [[proxy]]
            prefix = "/api/"
            upstreams = ["http://10.0.0.1:8080/v1/", { url = "http://10.0.0.2:8080/v1/", weight = 3, max-fails = 2, fail_timeout = "30s", max_conns = 100 }]
            balance = "hash:header:X-User"
            connect_timeout = 5
            read_timeout = "2m"
            send_timeout = 1.5
            next_upstream = false
            next_upstream_tries = 2
            buffering = "on"
            health_interval = "10s"
            health_path = "/healthz"
            health_status = "200,204"
            health_rise = 1
            health-fall = 5
            health_timeout = "500ms"
            forwarded = "forwarded"
            trusted_proxies = ["10.0.0.0/8", "::1"]
            host = "pass"
            redirect = [{ from = "http://10.0.0.9/", to = "/old/" }, "default"]
            set_header = { "X-Real-IP" = "$remote_addr", "Accept-Encoding" = "" }
            hide_header = ["X-Powered-By"]
            intercept_errors = "on"
            accel_redirect = "off"

            [[proxy]]
            prefix = "/static/"
            upstreams = ["http://10.0.0.3"]
            "#,
        )
        .unwrap();
        assert_eq!(r.len(), 2);
        let a = &r[0];
        assert_eq!(a.prefix, "/api/");
        assert_eq!(a.upstreams[1].weight, 3);
        assert_eq!(a.upstreams[1].max_fails, 2);
        assert_eq!(
            (a.upstreams[0].max_conns, a.upstreams[1].max_conns),
            (0, 100)
        );
        assert_eq!(a.upstreams[1].fail_timeout, Duration::from_secs(30));
        assert_eq!(a.balance, Balance::Hash(HashKey::Header("X-User".into())));
        assert_eq!(
            (a.connect_timeout, a.read_timeout, a.send_timeout),
            (
                Duration::from_secs(5),
                Duration::from_secs(120),
                Duration::from_millis(1500)
            )
        );
        assert!(!a.next_upstream && a.next_upstream_tries == 2);
        assert_eq!(a.buffering, Buffering::On);
        let h = a.health.as_ref().unwrap();
        assert_eq!(h.path, "/healthz");
        assert_eq!(h.expect_status, StatusMatch::List(vec![200, 204]));
        assert_eq!(
            (h.rise, h.fall, h.timeout),
            (1, 5, Duration::from_millis(500))
        );
        assert_eq!(a.forwarded, ForwardedStyle::Forwarded);
        assert_eq!(a.trusted_proxies.len(), 2);
        assert_eq!(a.host, HostMode::Pass);
        assert_eq!(
            a.redirect,
            vec![
                Redirect::replace("http://10.0.0.9/", "/old/").unwrap(),
                Redirect::Default
            ]
        );
        assert_eq!(
            a.set_header,
            vec![
                SetHeader::new("Accept-Encoding", "").unwrap(),
                SetHeader::new("X-Real-IP", "$remote_addr").unwrap()
            ],
            "in the table's order (toml's: by name)"
        );
        assert_eq!(a.hide_header, vec!["X-Powered-By".to_string()]);
        assert!(
            a.intercept_errors && !r[1].intercept_errors,
            "off by default"
        );
        assert!(!a.accel_redirect && r[1].accel_redirect, "on by default");
        assert!(r[1].health.is_none(), "no health_ key: no active checks");
        assert_eq!(r[1].redirect, vec![Redirect::Default], "nginx's default");
    }

    #[test]
    fn redirect_takes_default_off_or_a_list_of_rules() {
        let one = |v: &str| {
            routes(&format!(
                "[[proxy]]\nprefix = \"/a/\"\nupstreams = [\"http://a\"]\nredirect = {v}\n"
            ))
            .map(|r| r[0].redirect.clone())
        };
        assert_eq!(one("\"off\"").unwrap(), vec![]);
        assert_eq!(one("\"default\"").unwrap(), vec![Redirect::Default]);
        assert_eq!(one("[]").unwrap(), vec![]);
        for (v, says) in [
            ("\"on\"", "expected default, off"),
            ("[\"off\"]", "`off` stands alone"),
            ("[{ from = \"http://a/\" }]", "needs `from` and `to`"),
            (
                "[{ from = \"http://a/\", to = \"/\", as = 1 }]",
                "unknown key `as`",
            ),
            ("[{ from = \"\", to = \"/\" }]", "`from` is empty"),
            (
                "[{ from = \"http://a/\", to = \"/x y\" }]",
                "no spaces or controls",
            ),
            ("3", "expected \"default\", \"off\" or a list"),
        ] {
            let e = one(v).unwrap_err();
            assert!(
                e.contains("/a/: redirect") && e.contains(says),
                "{v}\n=> {e}"
            );
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn cookie_rules_take_off_or_a_list_of_rules() {
        let one = |key: &str, v: &str| {
            routes(&format!(
                "[[proxy]]\nprefix = \"/a/\"\nupstreams = [\"http://a\"]\n{key} = {v}\n"
            ))
            .map(|r| (r[0].cookie_domain.clone(), r[0].cookie_path.clone()))
        };
        let none = routes("[[proxy]]\nprefix = \"/a/\"\nupstreams = [\"http://a\"]\n").unwrap();
        assert!(
            none[0].cookie_domain.is_empty() && none[0].cookie_path.is_empty(),
            "nginx's default: off"
        );
        assert_eq!(one("cookie_path", "\"off\"").unwrap().1, vec![]);
        assert_eq!(
            one(
                "cookie_domain",
                "[{ from = \".Internal\", to = \"example.org\" }]"
            )
            .unwrap()
            .0,
            vec![CookieRule::domain("Internal", "example.org").unwrap()]
        );
        assert_eq!(
            one(
                "cookie_path",
                "[{ from = \"/v1/\", to = \"/api/\" }, { from = \"/\", to = \"/api/\" }]"
            )
            .unwrap()
            .1,
            vec![
                CookieRule::path("/v1/", "/api/").unwrap(),
                CookieRule::path("/", "/api/").unwrap()
            ]
        );
        for (key, v, says) in [
            ("cookie_path", "\"on\"", "expected \"off\" or a list"),
            ("cookie_path", "[\"/v1/\"]", "expected a { from, to } table"),
            (
                "cookie_domain",
                "[{ from = \"a\" }]",
                "needs `from` and `to`",
            ),
            (
                "cookie_domain",
                "[{ from = \"a\", to = \"b\", x = 1 }]",
                "unknown key `x`",
            ),
            (
                "cookie_path",
                "[{ from = \"\", to = \"/\" }]",
                "`from` is empty",
            ),
            (
                "cookie_path",
                "[{ from = \"/\", to = \"/a;b\" }]",
                "no spaces, controls, `;`",
            ),
        ] {
            let e = one(key, v).unwrap_err();
            assert!(
                e.contains(&format!("/a/: {key}")) && e.contains(says),
                "{v}\n=> {e}"
            );
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn cookie_flags_take_off_or_a_list_of_entries() {
        let one = |v: &str| {
            routes(&format!(
                "[[proxy]]\nprefix = \"/a/\"\nupstreams = [\"http://a\"]\ncookie_flags = {v}\n"
            ))
            .map(|r| r[0].cookie_flags.clone())
        };
        assert_eq!(one("\"off\"").unwrap(), vec![]);
        assert_eq!(
            one("[{ cookie = \"sid\", flags = [\"Secure\", \"samesite=lax\"] }, { cookie = \"*\", flags = [\"nosecure\"] }]").unwrap(),
            vec![
                CookieFlags::new("sid", vec![CookieFlag::Secure, CookieFlag::SameSite(mpm_proxy::SameSite::Lax)]).unwrap(),
                CookieFlags::new("*", vec![CookieFlag::NoSecure]).unwrap(),
            ]
        );
        for (v, says) in [
            ("\"on\"", "expected \"off\" or a list"),
            (
                "[{ cookie = \"sid\" }]",
                "needs a `cookie` string and a `flags` list",
            ),
            (
                "[{ cookie = \"sid\", flags = [\"secret\"] }]",
                "flag 'secret': expected secure",
            ),
            ("[{ cookie = \"sid\", flags = [] }]", "1 to 8 flags"),
            (
                "[{ cookie = \"a=b\", flags = [\"secure\"] }]",
                "a cookie's name",
            ),
            (
                "[{ cookie = \"sid\", flags = [\"secure\"], on = 1 }]",
                "unknown key `on`",
            ),
        ] {
            let e = one(v).unwrap_err();
            assert!(
                e.contains("/a/: cookie_flags") && e.contains(says),
                "{v}\n=> {e}"
            );
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn a_bad_table_is_one_line_naming_the_route_and_the_key() {
        for (text, says) in [
            ("[[proxy]]\nupstreams = [\"http://a\"]\n", "no `prefix`"),
            ("[[proxy]]\nprefix = \"/a/\"\n", "no upstreams"),
            ("[[proxy]]\nprefix = \"/a/\"\nupstreams = []\n", "no upstreams"),
            ("[[proxy]]\nprefix = \"/a/\"\nupstreams = [\"http://a\"]\nbalanse = \"least-conn\"\n", "did you mean `balance`"),
            ("[[proxy]]\nprefix = \"/a/\"\nupstreams = [\"http://a\"]\nbalance = \"random\"\n", "[[proxy]] /a/: balance 'random'"),
            ("[[proxy]]\nprefix = \"/a/\"\nupstreams = [\"http://a\"]\nread_timeout = \"soon\"\n", "/a/: read_timeout: 'soon' is not a duration"),
            ("[[proxy]]\nprefix = \"/a/\"\nupstreams = [{ url = \"http://a\", weight = 0 }]\n", "weight 0 must be 1 to 1000"),
            ("[[proxy]]\nprefix = \"/a/\"\nupstreams = [{ url = \"http://a\", max_conns = 10001 }]\n", "max_conns 10001 must be 0 to 10000"),
            ("[[proxy]]\nprefix = \"/a/\"\nupstreams = [{ url = \"http://a\", max_conns = -1 }]\n", "max_conns"),
            ("[[proxy]]\nprefix = \"/a/\"\nupstreams = [{ url = \"http://a\", wieght = 2 }]\n", "unknown key `wieght`"),
            ("[[proxy]]\nprefix = \"/a/\"\nupstreams = [\"http://a\"]\ntrusted_proxies = [\"10.0.0.0/33\"]\n", "trusted_proxies"),
            ("[[proxy]]\nprefix = \"/a/\"\nupstreams = [\"http://a\"]\nhealth_rise = 0\n", "health_rise 0"),
            ("[[proxy]]\nprefix = \"/a/\"\nupstreams = [\"http://a\"]\nnext_upstream = \"maybe\"\n", "next_upstream"),
            ("[[proxy]]\nprefix = \"/a/\"\nupstreams = [\"http://a\"]\naccel_redirect = \"maybe\"\n", "/a/: accel_redirect"),
            ("[[proxy]]\nprefix = \"/a/\"\nupstreams = [\"http://a\"]\n[[proxy]]\nprefix = \"/a/\"\nupstreams = [\"http://b\"]\n", "/a/ is given twice"),
            ("proxy = 3\n", "expected an array"),
            ("[[proxy]]\nprefix = \"/a/\"\nupstreams = [\"http://a\"]\nset_header = { \"X-A\" = \"$cookie\" }\n", "'$cookie' is not a variable here"),
            ("[[proxy]]\nprefix = \"/a/\"\nupstreams = [\"http://a\"]\nset_header = { \"X-Forwarded-For\" = \"$remote_addr\" }\n", "set forwarded = \"off\""),
            ("[[proxy]]\nprefix = \"/a/\"\nupstreams = [\"http://a\"]\nset_header = { \"Host\" = \"a\" }\n", "the route's `host` sets it"),
            ("[[proxy]]\nprefix = \"/a/\"\nupstreams = [\"http://a\"]\nset_header = { \"X-A\" = 1 }\n", "X-A: expected a string"),
            ("[[proxy]]\nprefix = \"/a/\"\nupstreams = [\"http://a\"]\nset_header = \"X-A: 1\"\n", "expected a table"),
            ("[[proxy]]\nprefix = \"/a/\"\nupstreams = [\"http://a\"]\nhide_header = [\"X A\"]\n", "hide_header 'X A'"),
            ("[[proxy]]\nprefix = \"/a/\"\nupstreams = [{ url = \"http://a\", backup = true }]\n", "every upstream is a backup"),
            ("[[proxy]]\nprefix = \"/a/\"\nupstreams = [\"https://a\"]\nclient_cert = \"/c.pem\"\n", "client_cert: needs client_key too"),
            ("[[proxy]]\nprefix = \"/a/\"\nupstreams = [\"http://a\"]\nclient_cert = \"/c.pem\"\nclient_key = \"/k.pem\"\n", "client_cert is for https:// upstreams"),
            ("[[proxy]]\nprefix = \"/a/\"\nupstreams = [\"http://a\", { url = \"http://b\", backup = true }]\nbalance = \"hash:client\"\n", "cannot be used with balance = \"hash:client\""),
            ("[[proxy]]\nprefix = \"/a/\"\nupstreams = [\"http://a\", { url = \"http://b\", backup = \"maybe\" }]\n", "http://b: backup"),
        ] {
            let e = routes(text).unwrap_err();
            assert!(e.contains(says), "{text}\n=> {e}");
            assert!(!e.contains('\n'), "{e}");
        }
        let e = routes("[[proxy]]\nprefix = \"/a/\"\nupstreams = [\"http://a\"]\nhost = \"a b\"\n")
            .unwrap_err();
        assert!(
            e.starts_with("line 1: proxy: [[proxy]] /a/: host 'a b'"),
            "{e}"
        );
    }

    #[test]
    fn the_pools_default_to_512_idle_connections_for_60s() {
        let c = Config::default();
        assert!(c.proxy.is_empty());
        assert_eq!(c.proxy_pools(), mpm_proxy::PoolSettings::default());
        assert_eq!(
            (c.proxy_keepalive, c.proxy_keepalive_timeout),
            (512, Duration::from_secs(60))
        );
    }

    #[test]
    fn a_flag_string_in_the_file_is_a_route_too() {
        let r = routes("proxy = [\"/api/=http://a/,http://b/\"]\n").unwrap();
        assert_eq!(r[0].upstreams.len(), 2);
    }
}
