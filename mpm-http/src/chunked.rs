//! Decoding a chunked request body (RFC 9112 section 7.1).

/// Why a chunked body was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChunkError {
    /// Malformed framing: answer 400.
    Invalid,
    /// The decoded body would exceed the limit: answer 413.
    TooLarge,
}

/// Decode a whole chunked body from the start of `input` into `out`.
///
/// Returns `Ok(None)` when more input is needed, or `Ok(Some(n))` with the
/// number of input bytes the body used (trailers included). Chunk extensions
/// are skipped; trailer fields are read and discarded.
pub(crate) fn decode(
    input: &[u8],
    limit: u64,
    out: &mut Vec<u8>,
) -> Result<Option<usize>, ChunkError> {
    out.clear();
    let mut pos = 0usize;
    loop {
        // chunk-size [ chunk-ext ] CRLF
        let Some(line_end) = find_crlf(&input[pos..])? else {
            return if input.len() - pos > 1024 {
                Err(ChunkError::Invalid)
            } else {
                Ok(None)
            };
        };
        let line = &input[pos..pos + line_end];
        let size_part = match line.iter().position(|&b| b == b';') {
            Some(i) => &line[..i],
            None => line,
        };
        let size = parse_hex(size_part)?;
        pos += line_end + 2;
        if size == 0 {
            // trailer-section CRLF
            loop {
                let Some(end) = find_crlf(&input[pos..])? else {
                    return if input.len() - pos > 8192 {
                        Err(ChunkError::Invalid)
                    } else {
                        Ok(None)
                    };
                };
                let trailer = &input[pos..pos + end];
                pos += end + 2;
                if trailer.is_empty() {
                    return Ok(Some(pos));
                }
                if !trailer.contains(&b':') || trailer.iter().any(|&b| b == b'\r' || b == 0) {
                    return Err(ChunkError::Invalid);
                }
            }
        }
        // Saturating: the limit may be anything up to `u64::MAX`.
        if (out.len() as u64).saturating_add(size) > limit {
            return Err(ChunkError::TooLarge);
        }
        let size = usize::try_from(size).unwrap_or(usize::MAX);
        if input.len() - pos < size.saturating_add(2) {
            return Ok(None);
        }
        out.extend_from_slice(&input[pos..pos + size]);
        pos += size;
        if &input[pos..pos + 2] != b"\r\n" {
            return Err(ChunkError::Invalid);
        }
        pos += 2;
    }
}

/// The index of the next CRLF, `None` if no line end has arrived yet.
/// A bare LF is refused: lenient framing is how bodies get smuggled.
fn find_crlf(b: &[u8]) -> Result<Option<usize>, ChunkError> {
    match b.iter().position(|&c| c == b'\n') {
        None => Ok(None),
        Some(i) if i > 0 && b[i - 1] == b'\r' => Ok(Some(i - 1)),
        Some(_) => Err(ChunkError::Invalid),
    }
}

fn parse_hex(s: &[u8]) -> Result<u64, ChunkError> {
    // Whitespace before an extension is tolerated (BWS), nothing else.
    let end = s
        .iter()
        .rposition(|&b| b != b' ' && b != b'\t')
        .map(|i| i + 1)
        .unwrap_or(0);
    let s = &s[..end];
    if s.is_empty() || s.len() > 15 {
        return Err(ChunkError::Invalid);
    }
    let mut v: u64 = 0;
    for &b in s {
        let d = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            b'A'..=b'F' => b - b'A' + 10,
            _ => return Err(ChunkError::Invalid),
        };
        v = v * 16 + u64::from(d);
    }
    Ok(v)
}

/// A chunked body decoded piece by piece, as it arrives: what a streamed
/// request body goes through. The same rules as [`decode`]: CRLF line ends
/// only, size lines up to 1 KiB, trailers up to 8 KiB (read and dropped),
/// the decoded total bounded by `limit`.
#[derive(Debug)]
pub(crate) struct Decoder {
    state: State,
    line: Vec<u8>,
    trailers: usize,
    total: u64,
    limit: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Size,
    Data(u64),
    DataEnd,
    Trailer,
    Done,
}

impl Decoder {
    pub(crate) fn new(limit: u64) -> Decoder {
        Decoder {
            state: State::Size,
            line: Vec::new(),
            trailers: 0,
            total: 0,
            limit,
        }
    }

    /// Has the last chunk and the trailer section's blank line been read?
    pub(crate) fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Decode from `input` into `out`: returns the input bytes used and the
    /// body bytes written. Stops when `out` is full, the input is used up,
    /// or the body ends (input after its end is left unused).
    pub(crate) fn decode(
        &mut self,
        input: &[u8],
        out: &mut [u8],
    ) -> Result<(usize, usize), ChunkError> {
        let (mut used, mut written) = (0, 0);
        while used < input.len() {
            match self.state {
                State::Done => break,
                State::Data(left) => {
                    if written == out.len() {
                        break;
                    }
                    let n = (input.len() - used)
                        .min(out.len() - written)
                        .min(usize::try_from(left).unwrap_or(usize::MAX));
                    out[written..written + n].copy_from_slice(&input[used..used + n]);
                    (used, written) = (used + n, written + n);
                    let left = left - n as u64;
                    self.state = if left == 0 {
                        State::DataEnd
                    } else {
                        State::Data(left)
                    };
                }
                State::Size | State::DataEnd | State::Trailer => {
                    let b = input[used];
                    used += 1;
                    self.line.push(b);
                    let max = match self.state {
                        State::Size => 1024,
                        State::DataEnd => 2,
                        _ => 8192 - self.trailers.min(8192),
                    };
                    if b != b'\n' {
                        if self.line.len() >= max || b == 0 {
                            return Err(ChunkError::Invalid);
                        }
                        continue;
                    }
                    let Some(line) = self.line.strip_suffix(b"\r\n") else {
                        return Err(ChunkError::Invalid); // a bare LF
                    };
                    self.state = match self.state {
                        State::Size => {
                            let size_part = match line.iter().position(|&b| b == b';') {
                                Some(i) => &line[..i],
                                None => line,
                            };
                            // Checked: the limit may be `u64::MAX` (none).
                            match parse_hex(size_part)? {
                                0 => State::Trailer,
                                n => match self.total.checked_add(n) {
                                    Some(total) if total <= self.limit => {
                                        self.total = total;
                                        State::Data(n)
                                    }
                                    _ => return Err(ChunkError::TooLarge),
                                },
                            }
                        }
                        State::DataEnd if line.is_empty() => State::Size,
                        State::DataEnd => return Err(ChunkError::Invalid),
                        _ if line.is_empty() => State::Done,
                        _ => {
                            if !line.contains(&b':') || line.contains(&b'\r') {
                                return Err(ChunkError::Invalid);
                            }
                            self.trailers += line.len() + 2;
                            State::Trailer
                        }
                    };
                    self.line.clear();
                }
            }
        }
        Ok((used, written))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whole(input: &[u8]) -> Result<Option<(Vec<u8>, usize)>, ChunkError> {
        let mut out = Vec::new();
        decode(input, 1 << 20, &mut out).map(|o| o.map(|n| (out, n)))
    }

    #[test]
    fn decodes_chunks_with_extensions_and_trailers() {
        let (body, n) = whole(b"4;ext=1\r\nWiki\r\n5\r\npedia\r\n0\r\nX-T: 1\r\n\r\nNEXT")
            .unwrap()
            .unwrap();
        assert_eq!(body, b"Wikipedia");
        assert_eq!(n, 38);
    }

    #[test]
    fn incomplete_input_asks_for_more() {
        assert_eq!(whole(b"4\r\nWi").unwrap(), None);
        assert_eq!(whole(b"4\r\nWiki\r\n0\r\n").unwrap(), None);
    }

    #[test]
    fn bad_sizes_and_bare_lf_are_invalid() {
        assert_eq!(whole(b"zz\r\n").unwrap_err(), ChunkError::Invalid);
        assert_eq!(whole(b"-1\r\n").unwrap_err(), ChunkError::Invalid);
        assert_eq!(whole(b"4\nWiki\n0\n\n").unwrap_err(), ChunkError::Invalid);
        assert_eq!(
            whole(b"4\r\nWikiXX0\r\n\r\n").unwrap_err(),
            ChunkError::Invalid
        );
        assert_eq!(
            whole(b"ffffffffffffffffff\r\n").unwrap_err(),
            ChunkError::Invalid
        );
    }

    /// Feed `input` `step` bytes at a time through a small output buffer.
    fn streamed(input: &[u8], step: usize, limit: u64) -> Result<(Vec<u8>, usize), ChunkError> {
        let mut d = Decoder::new(limit);
        let (mut body, mut pos) = (Vec::new(), 0);
        let mut out = [0u8; 3];
        while !d.is_done() && pos < input.len() {
            let end = (pos + step).min(input.len());
            let (u, w) = d.decode(&input[pos..end], &mut out)?;
            body.extend_from_slice(&out[..w]);
            pos += u;
        }
        Ok((body, pos))
    }

    #[test]
    fn the_streaming_decoder_agrees_with_the_whole_one_however_input_is_cut() {
        let input = b"4;ext=1\r\nWiki\r\n5\r\npedia\r\n0\r\nX-T: 1\r\n\r\nNEXT";
        for step in 1..input.len() {
            let (body, used) = streamed(input, step, 1 << 20).unwrap();
            assert_eq!((&body[..], used), (&b"Wikipedia"[..], 38), "step {step}");
        }
        for bad in [&b"zz\r\n"[..], b"4\nWiki\n0\n\n", b"4\r\nWikiXX0\r\n\r\n"] {
            assert_eq!(streamed(bad, 2, 1 << 20).unwrap_err(), ChunkError::Invalid);
        }
        assert_eq!(
            streamed(b"5\r\nhello\r\n5\r\nworld\r\n0\r\n\r\n", 4, 8).unwrap_err(),
            ChunkError::TooLarge
        );
    }

    /// The streamed source trusts `is_done` after a decode that also wrote
    /// bytes: data and the last chunk in one buffer end the body in that
    /// one call, with nothing after the end used.
    #[test]
    fn data_and_the_last_chunk_in_one_buffer_end_the_body_in_one_decode() {
        let input = b"5\r\nhello\r\n0\r\n\r\nGET";
        for room in [5, 6, 64] {
            let mut d = Decoder::new(1 << 20);
            let mut out = vec![0u8; room];
            let (used, written) = d.decode(input, &mut out).unwrap();
            assert_eq!((used, written), (input.len() - 3, 5), "room {room}");
            assert_eq!(&out[..5], b"hello");
            assert!(d.is_done(), "room {room}");
            assert_eq!(d.decode(b"GET", &mut out).unwrap(), (0, 0));
        }
    }

    #[test]
    fn the_last_chunk_cut_at_any_byte_across_two_decodes_ends_the_body() {
        for input in [
            &b"5\r\nhello\r\n0\r\n\r\n"[..],
            b"5\r\nhello\r\n0;ext\r\nX-T: 1\r\nX-U: 2\r\n\r\n",
        ] {
            for cut in 0..=input.len() {
                let mut d = Decoder::new(1 << 20);
                let mut out = [0u8; 64];
                let (u1, w1) = d.decode(&input[..cut], &mut out).unwrap();
                assert_eq!(u1, cut, "the first part is used whole");
                let (u2, w2) = d.decode(&input[cut..], &mut out[w1..]).unwrap();
                assert_eq!(u1 + u2, input.len(), "cut {cut}");
                assert_eq!(&out[..w1 + w2], b"hello", "cut {cut}");
                assert!(d.is_done(), "cut {cut}");
            }
        }
    }

    #[test]
    fn with_no_limit_any_chunk_size_is_taken_without_overflow() {
        // `--limit-request-body 0` makes the limit `u64::MAX`: a chunk past
        // 2^31 and the largest a size line may say (15 hex digits) wait for
        // their data, as any chunk within the limit does.
        for size in ["80000001", "fffffffffffffff"] {
            let line = format!("{size}\r\n");
            let mut out = Vec::new();
            assert_eq!(decode(line.as_bytes(), u64::MAX, &mut out), Ok(None));
            let mut d = Decoder::new(u64::MAX);
            assert_eq!(
                d.decode(line.as_bytes(), &mut [0u8; 8]),
                Ok((line.len(), 0))
            );
        }
        // The running total next to u64::MAX: refused, not wrapped.
        let mut d = Decoder::new(u64::MAX);
        d.total = u64::MAX - 4;
        assert_eq!(
            d.decode(b"10\r\n", &mut [0u8; 8]),
            Err(ChunkError::TooLarge)
        );
    }

    #[test]
    fn bodies_over_the_limit_are_too_large() {
        let mut out = Vec::new();
        assert_eq!(
            decode(b"10\r\n", 8, &mut out).unwrap_err(),
            ChunkError::TooLarge
        );
    }
}
