//! The simulated camera and the observations the robot sends.

use stagetrace_net::{msg::MsgMap, msg::NdArray};

use crate::random::{fill_random, xorshift};

/// Width of a simulated camera frame in pixels (RGB, 3 bytes a pixel); the
/// frame has as many rows as the payload needs.
pub(crate) const FRAME_WIDTH: u64 = 160;

/// The prompt every simulated observation carries.
pub const PROMPT: &str = "pick up the red cup";

/// The observation key of the camera frame (openpi's naming); the simulated
/// model's answer is a function of it.
pub(crate) const IMAGE_KEY: &str = "observation/image";

/// Seed of the simulated camera's pseudo-random pixels.
const CAMERA_SEED: u64 = 0x9e37_79b9_7f4a_7c15;

/// How the simulated camera renews its frame between captures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refresh {
    /// Refill the whole frame with fresh pseudo-random bytes: memory work
    /// that grows with the frame, as a real capture's readout does.
    Full,
    /// Fill the frame once per size, then overwrite its first 8 bytes each
    /// capture: frames still differ, but the capture's cost does not grow
    /// with the frame (so a payload ramp loads the transport only).
    Touch,
}

/// The simulated camera: an RGB frame `FRAME_WIDTH` pixels wide and as
/// many rows as the payload needs, pseudo-random from a fixed seed (so a
/// run's frames are the same in every run).
#[derive(Debug)]
pub struct Camera {
    frame: Vec<u8>,
    shape: [u64; 3],
    kb: Option<u64>,
    state: u64,
    refresh: Refresh,
}

impl Camera {
    /// A camera with no frame yet; the first capture sizes it.
    pub fn new(refresh: Refresh) -> Self {
        Camera {
            frame: Vec::new(),
            shape: [0, FRAME_WIDTH, 3],
            kb: None,
            state: CAMERA_SEED,
            refresh,
        }
    }

    /// Capture a frame of at least `kb` KiB (whole rows); `None` for 0 KiB.
    pub fn capture(&mut self, kb: u64) -> Option<NdArray> {
        if self.kb != Some(kb) {
            let row = FRAME_WIDTH * 3;
            let rows = kb.saturating_mul(1024).div_ceil(row);
            self.shape = [rows, FRAME_WIDTH, 3];
            self.frame = vec![0; usize::try_from(rows.saturating_mul(row)).unwrap_or(0)];
            self.kb = Some(kb);
            if self.refresh == Refresh::Touch {
                fill_random(&mut self.frame, &mut self.state);
            }
        }
        if self.frame.is_empty() {
            return None;
        }
        match self.refresh {
            Refresh::Full => fill_random(&mut self.frame, &mut self.state),
            Refresh::Touch => {
                let v = xorshift(&mut self.state).to_le_bytes();
                let n = v.len().min(self.frame.len());
                self.frame[..n].copy_from_slice(&v[..n]);
            }
        }
        Some(NdArray::from_u8(self.frame.clone(), &self.shape))
    }
}

/// The observation the robot sends for call `seq`: the prompt, the call
/// number, a 7-joint state and, if there is one, the camera frame
/// (`IMAGE_KEY`).
pub fn observation(seq: u64, frame: Option<NdArray>) -> MsgMap {
    let mut obs = MsgMap::new().with("prompt", PROMPT).with("seq", seq).with(
        "observation/state",
        NdArray::from_f32(&[0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6], &[7]),
    );
    if let Some(frame) = frame {
        obs.insert(IMAGE_KEY, frame);
    }
    obs
}

/// One of a few fixed scenes (a 64 × 64 RGB image of one value) with the
/// prompt and no call number: the same scene is the same request in every
/// call and every run, so a result cache can answer repeats.
pub fn scene(scene: u8) -> MsgMap {
    MsgMap::new().with("prompt", PROMPT).with(
        IMAGE_KEY,
        NdArray::from_u8(vec![scene; 64 * 64 * 3], &[64, 64, 3]),
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn camera_frames_have_whole_rows_and_differ() {
        for refresh in [Refresh::Full, Refresh::Touch] {
            let mut cam = Camera::new(refresh);
            assert!(cam.capture(0).is_none());
            let a = cam.capture(100).unwrap();
            let b = cam.capture(100).unwrap();
            // 100 KiB in rows of 480 bytes: 214 rows.
            assert_eq!(a.shape, vec![214, FRAME_WIDTH, 3]);
            assert_eq!(a.data.len(), 214 * 480);
            assert_ne!(a.data, b.data, "{refresh:?}: frames must differ");
            let c = cam.capture(1).unwrap();
            assert_eq!(c.shape, vec![3, FRAME_WIDTH, 3]);
        }
        // Touch renews only the first 8 bytes; Full renews all of them.
        let mut cam = Camera::new(Refresh::Touch);
        let (a, b) = (cam.capture(4).unwrap(), cam.capture(4).unwrap());
        assert_eq!(a.data[8..], b.data[8..]);
        let mut cam = Camera::new(Refresh::Full);
        let (a, b) = (cam.capture(4).unwrap(), cam.capture(4).unwrap());
        assert_ne!(a.data[8..], b.data[8..]);
        // Same seed, same frames.
        let mut again = Camera::new(Refresh::Full);
        assert_eq!(again.capture(4).unwrap().data, a.data);
    }

    #[test]
    fn scenes_repeat_and_differ() {
        assert_eq!(scene(3), scene(3));
        assert_ne!(scene(3), scene(4));
        assert!(scene(3).get("seq").is_none());
    }
}
