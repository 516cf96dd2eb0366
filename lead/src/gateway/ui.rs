//! The run inspector: a page the gateway serves at `/`, with its script and style at
//! `/ui/app.js` and `/ui/app.css`, compiled into the binary (no build step, no CDN, no
//! third-party code). The page holds no data and loads without a token; everything it
//! shows it reads from the public API with the token the user gives it (kept in the tab's
//! `sessionStorage`), so it shows nothing an API client could not read. A strict CSP
//! (`self` only, no inline script) and `frame-ancestors 'none'` keep it from being framed
//! or fed script.

use actix_web::{web, HttpResponse};

const INDEX: &str = include_str!("ui/index.html");
const SCRIPT: &str = include_str!("ui/app.js");
const STYLE: &str = include_str!("ui/app.css");

/// The page's content security policy.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
connect-src 'self'; form-action 'none'; base-uri 'none'; frame-ancestors 'none'";

fn page(content_type: &str, body: &'static str) -> HttpResponse {
    HttpResponse::Ok()
        .content_type(content_type)
        .insert_header(("Content-Security-Policy", CSP))
        .insert_header(("X-Content-Type-Options", "nosniff"))
        .insert_header(("X-Frame-Options", "DENY"))
        .insert_header(("Referrer-Policy", "no-referrer"))
        .insert_header(("Cache-Control", "no-cache"))
        .body(body)
}

/// `GET /`: the inspector's page.
pub async fn index() -> HttpResponse {
    page("text/html; charset=utf-8", INDEX)
}

/// `GET /ui/{asset}`: its script or style.
pub async fn asset(name: web::Path<String>) -> HttpResponse {
    match name.as_str() {
        "app.js" => page("text/javascript; charset=utf-8", SCRIPT),
        "app.css" => page("text/css; charset=utf-8", STYLE),
        _ => HttpResponse::NotFound().finish(),
    }
}

/// `GET /favicon.ico`: none (204), so a browser's automatic request logs no error.
pub async fn favicon() -> HttpResponse {
    HttpResponse::NoContent()
        .insert_header(("Cache-Control", "max-age=86400"))
        .finish()
}
