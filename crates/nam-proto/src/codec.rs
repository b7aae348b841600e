//! Little-endian byte writer and bounds-checked reader used by every message.

use crate::DecodeError;

/// Appends little-endian fields to a buffer.
#[derive(Default)]
pub struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    /// A writer with room for `capacity` bytes.
    pub fn with_capacity(capacity: usize) -> Writer {
        Writer { buf: Vec::with_capacity(capacity) }
    }
    /// Appends a `u16`.
    pub fn u16(&mut self, v: u16) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    /// Appends a `u32`.
    pub fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    /// Appends a `u64`.
    pub fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    /// Appends a string as `u16` length + UTF-8 bytes. Callers bound the length first.
    pub fn str16(&mut self, s: &str) {
        debug_assert!(s.len() <= u16::MAX as usize);
        self.u16(s.len() as u16);
        self.buf.extend_from_slice(s.as_bytes());
    }
    /// Appends bytes as `u32` length + bytes.
    pub fn bytes32(&mut self, b: &[u8]) {
        self.u32(b.len() as u32);
        self.buf.extend_from_slice(b);
    }
    /// Overwrites a `u32` at `at` (used to patch the body length).
    pub fn patch_u32(&mut self, at: usize, v: u32) {
        self.buf[at..at + 4].copy_from_slice(&v.to_le_bytes());
    }
    /// Bytes written so far.
    pub fn len(&self) -> usize {
        self.buf.len()
    }
    /// Whether nothing was written.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
    /// The finished bytes.
    pub fn finish(self) -> Vec<u8> {
        self.buf
    }
}

/// Reads little-endian fields, failing with a typed error instead of reading past the end.
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// A reader over `buf`.
    pub fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf, pos: 0 }
    }
    /// Whether every byte has been read.
    pub fn at_end(&self) -> bool {
        self.pos == self.buf.len()
    }
    fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], DecodeError> {
        let have = self.buf.len() - self.pos;
        if n > have {
            return Err(DecodeError::Truncated { field, need: n, have });
        }
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }
    /// Reads a `u16`.
    pub fn u16(&mut self, field: &'static str) -> Result<u16, DecodeError> {
        Ok(u16::from_le_bytes(self.take(2, field)?.try_into().unwrap()))
    }
    /// Reads a `u32`.
    pub fn u32(&mut self, field: &'static str) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.take(4, field)?.try_into().unwrap()))
    }
    /// Reads a `u64`.
    pub fn u64(&mut self, field: &'static str) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.take(8, field)?.try_into().unwrap()))
    }
    /// Reads a `u16`-length UTF-8 string of at most `max` bytes.
    pub fn str16(&mut self, field: &'static str, max: usize) -> Result<String, DecodeError> {
        let len = self.u16(field)? as usize;
        if len > max {
            return Err(DecodeError::TooLong { field, len, max });
        }
        let bytes = self.take(len, field)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| DecodeError::InvalidUtf8 { field })
    }
    /// Reads `u32`-length bytes of at most `max` bytes.
    pub fn bytes32(&mut self, field: &'static str, max: usize) -> Result<Vec<u8>, DecodeError> {
        let len = self.u32(field)? as usize;
        if len > max {
            return Err(DecodeError::TooLong { field, len, max });
        }
        Ok(self.take(len, field)?.to_vec())
    }
    /// Like [`Reader::bytes32`], borrowing the bytes instead of copying them.
    pub fn bytes32_borrowed(&mut self, field: &'static str, max: usize) -> Result<&'a [u8], DecodeError> {
        let len = self.u32(field)? as usize;
        if len > max {
            return Err(DecodeError::TooLong { field, len, max });
        }
        self.take(len, field)
    }

    /// Fails unless every byte was consumed.
    pub fn finish(self) -> Result<(), DecodeError> {
        let extra = self.buf.len() - self.pos;
        if extra == 0 {
            Ok(())
        } else {
            Err(DecodeError::TrailingBytes { extra })
        }
    }
}
