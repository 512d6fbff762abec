//! The [`HandlerFactory`] that runs an [`HttpHandler`] in every worker.

use std::sync::Arc;

use mpm_core::HandlerFactory;

use crate::access_log::AccessLog;
use crate::connection::HttpService;
use crate::handler::HttpHandler;
use crate::settings::{HttpSettings, ServiceSettings};

/// A [`HandlerFactory`] that wraps each worker's [`HttpHandler`] in an
/// [`HttpService`].
pub struct HttpFactory<F> {
    settings: Arc<ServiceSettings>,
    make: F,
}

impl<F> std::fmt::Debug for HttpFactory<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpFactory")
            .field("settings", &self.settings)
            .finish()
    }
}

impl<F, H> HttpFactory<F>
where
    F: Fn() -> H + Send + Sync + 'static,
    H: HttpHandler,
{
    /// Serve handlers made by `make` (called once per worker) with these
    /// settings.
    pub fn new(settings: HttpSettings, make: F) -> Self {
        HttpFactory {
            settings: Arc::new(ServiceSettings::new(&settings)),
            make,
        }
    }

    /// Log every response of every worker to `log` (`None`: no access log).
    pub fn access_log(mut self, log: Option<Arc<AccessLog>>) -> Self {
        Arc::make_mut(&mut self.settings).access_log = log;
        self
    }
}

impl<F, H> HandlerFactory for HttpFactory<F>
where
    F: Fn() -> H + Send + Sync + 'static,
    H: HttpHandler,
{
    type Handler = HttpService<H>;

    fn build(&self) -> HttpService<H> {
        HttpService::with_settings((self.make)(), Arc::clone(&self.settings))
    }
}
