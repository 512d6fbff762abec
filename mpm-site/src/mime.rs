//! Media types by file extension.

/// The `Content-Type` for a file name, by its extension (case-insensitive);
/// `application/octet-stream` when unknown.
pub fn content_type(name: &str) -> &'static str {
    let ext = match name.rsplit_once('.') {
        Some((_, ext)) if !ext.contains('/') => ext,
        _ => return "application/octet-stream",
    };
    const TABLE: &[(&str, &str)] = &[
        ("html", "text/html; charset=utf-8"),
        ("htm", "text/html; charset=utf-8"),
        ("css", "text/css; charset=utf-8"),
        ("js", "text/javascript; charset=utf-8"),
        ("mjs", "text/javascript; charset=utf-8"),
        ("json", "application/json"),
        ("txt", "text/plain; charset=utf-8"),
        ("md", "text/markdown; charset=utf-8"),
        ("csv", "text/csv; charset=utf-8"),
        ("xml", "application/xml"),
        ("svg", "image/svg+xml"),
        ("png", "image/png"),
        ("jpg", "image/jpeg"),
        ("jpeg", "image/jpeg"),
        ("gif", "image/gif"),
        ("webp", "image/webp"),
        ("avif", "image/avif"),
        ("ico", "image/x-icon"),
        ("pdf", "application/pdf"),
        ("wasm", "application/wasm"),
        ("woff", "font/woff"),
        ("woff2", "font/woff2"),
        ("ttf", "font/ttf"),
        ("otf", "font/otf"),
        ("mp3", "audio/mpeg"),
        ("ogg", "audio/ogg"),
        ("wav", "audio/wav"),
        ("mp4", "video/mp4"),
        ("webm", "video/webm"),
        ("zip", "application/zip"),
        ("gz", "application/gzip"),
        ("tar", "application/x-tar"),
        ("bz2", "application/x-bzip2"),
        ("xz", "application/x-xz"),
        ("zst", "application/zstd"),
    ];
    TABLE
        .iter()
        .find(|(e, _)| e.eq_ignore_ascii_case(ext))
        .map_or("application/octet-stream", |(_, t)| t)
}

#[cfg(test)]
mod tests {
    use super::content_type;

    #[test]
    fn types_follow_the_extension_case_insensitively() {
        assert_eq!(content_type("index.HTML"), "text/html; charset=utf-8");
        assert_eq!(content_type("a/b.png"), "image/png");
        assert_eq!(content_type("big.bin"), "application/octet-stream");
        assert_eq!(content_type("README"), "application/octet-stream");
    }
}
