//! JSON request and response bodies with serde_json (the `json` feature).

use std::io::Read;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::request::Request;
use crate::response::Response;
use crate::router::{IntoResponse, Rejection};

/// A value answered as JSON (`Content-Type: application/json`), with
/// status 200 or the one given: `Json(&item)` or `(201, Json(&item))`.
///
/// ```
/// use mpm_http::{IntoResponse, Json};
/// let r = Json(serde_json::json!({"ok": true})).into_response();
/// assert_eq!(r.header_value("content-type"), Some("application/json"));
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Json<T>(pub T);

impl<T: Serialize> IntoResponse for Json<T> {
    fn into_response(self) -> Response {
        Response::json(200, &self.0)
    }
}

impl<T: Serialize> IntoResponse for (u16, Json<T>) {
    fn into_response(self) -> Response {
        Response::json(self.0, &self.1 .0)
    }
}

impl Response {
    /// `value` as a JSON body with this status; a value serde_json cannot
    /// write (a map with non-string keys) is answered 500 and logged.
    pub fn json<T: Serialize + ?Sized>(status: u16, value: &T) -> Response {
        match serde_json::to_vec(value) {
            Ok(body) => Response::new(status)
                .header("Content-Type", "application/json")
                .body(body),
            Err(e) => {
                mpm_core::log_error!("mpm: a JSON response could not be written: {e}");
                Response::error(500)
            }
        }
    }
}

impl Request<'_> {
    /// The body, parsed as JSON into `T`. Refused as axum's `Json` refuses:
    /// 415 unless `Content-Type` is `application/json` (or `…+json`), 400
    /// for JSON that does not parse, 422 for JSON of the wrong shape. A
    /// streamed body is read to its end first (up to the body limit).
    ///
    /// ```
    /// use mpm_http::{Request, Version};
    /// #[derive(Debug, serde::Deserialize)]
    /// struct Item { name: String }
    ///
    /// let h = [("Content-Type", "application/json")];
    /// let req = Request::for_test("POST", "/items", Version::Http11, &h, br#"{"name":"x"}"#);
    /// assert_eq!(req.json::<Item>().unwrap().name, "x");
    /// let bad = Request::for_test("POST", "/items", Version::Http11, &h, br#"{"nom":1}"#);
    /// assert_eq!(bad.json::<Item>().unwrap_err().status, 422);
    /// let text = Request::for_test("POST", "/items", Version::Http11, &[], b"{}");
    /// assert_eq!(text.json::<Item>().unwrap_err().status, 415);
    /// ```
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, Rejection> {
        let is_json = self.header_str("content-type").is_some_and(|ct| {
            let mime = ct.split(';').next().unwrap_or("").trim();
            mime.eq_ignore_ascii_case("application/json")
                || (mime.len() > 5 && mime[mime.len() - 5..].eq_ignore_ascii_case("+json"))
        });
        if !is_json {
            return Err(Rejection::new(
                415,
                "expected a body with Content-Type: application/json",
            ));
        }
        let streamed;
        let bytes = if self.is_streamed() {
            let mut all = Vec::new();
            self.body_reader()
                .read_to_end(&mut all)
                .map_err(|e| Rejection::new(400, e.to_string()))?;
            streamed = all;
            &streamed[..]
        } else {
            self.body()
        };
        serde_json::from_slice(bytes).map_err(|e| {
            let status = match e.classify() {
                serde_json::error::Category::Data => 422,
                _ => 400,
            };
            Rejection::new(status, format!("invalid JSON body: {e}"))
        })
    }
}
