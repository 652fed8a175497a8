//! MLPs (fp32, as the seed keeps them) on matrixmultiply's SGEMM, and the DLRM forward pass that
//! joins them to pooled embeddings: bottom MLP (ReLU on every layer), `cat` interaction
//! `[bottom_out, pooled_0 … pooled_{T-1}]`, top MLP (ReLU between layers), sigmoid at the end.

use crate::error::{Error, Result};

/// A fully connected layer: `weight` is (out, in) row-major, as PyTorch stores it.
#[derive(Debug, Clone)]
pub struct Linear {
    pub inputs: usize,
    pub outputs: usize,
    pub weight: Vec<f32>,
    pub bias: Vec<f32>,
}

impl Linear {
    pub fn new(inputs: usize, outputs: usize, weight: Vec<f32>, bias: Vec<f32>) -> Result<Linear> {
        if weight.len() != inputs * outputs || bias.len() != outputs {
            return Err(Error::Shape(format!(
                "layer {inputs}→{outputs}: weight has {} values (need {}), bias {} (need {outputs})",
                weight.len(),
                inputs * outputs,
                bias.len()
            )));
        }
        Ok(Linear { inputs, outputs, weight, bias })
    }

    /// `y (rows × out) = x (rows × in, row stride x_stride) · Wᵀ + b`.
    pub fn forward_strided(&self, x: &[f32], x_stride: usize, rows: usize, y: &mut [f32]) {
        assert!(x_stride >= self.inputs && (rows == 0 || x.len() >= (rows - 1) * x_stride + self.inputs));
        assert!(y.len() >= rows * self.outputs);
        for r in 0..rows {
            y[r * self.outputs..(r + 1) * self.outputs].copy_from_slice(&self.bias);
        }
        if rows == 0 || self.inputs == 0 || self.outputs == 0 {
            return;
        }
        // SAFETY: A = x is rows × inputs with row stride x_stride and column stride 1: the last
        // element read is (rows-1)·x_stride + inputs - 1 < x.len() (asserted above). B = Wᵀ is
        // inputs × outputs read as weight[n·inputs + k] (row stride 1, column stride inputs),
        // within weight.len() = inputs·outputs (checked in `new`). C = y is rows × outputs,
        // row-major, within y.len() (asserted). The three slices do not overlap (y is a distinct
        // &mut borrow), and beta = 1 accumulates onto the bias already written.
        unsafe {
            matrixmultiply::sgemm(
                rows,
                self.inputs,
                self.outputs,
                1.0,
                x.as_ptr(),
                x_stride as isize,
                1,
                self.weight.as_ptr(),
                1,
                self.inputs as isize,
                1.0,
                y.as_mut_ptr(),
                self.outputs as isize,
                1,
            );
        }
    }
}

fn relu(v: &mut [f32]) {
    v.iter_mut().for_each(|x| *x = x.max(0.0));
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// The first NaN or infinite value of `dense` (rows × `width`), named by sample and feature:
/// the MLPs would carry it to a finite, confident prediction, so it is refused at the door.
pub fn check_finite_dense(dense: &[f32], width: usize) -> Result<()> {
    match dense.iter().position(|x| !x.is_finite()) {
        None => Ok(()),
        Some(at) => Err(Error::NonFiniteDense {
            sample: at / width.max(1),
            feature: at % width.max(1),
            value: if dense[at].is_nan() { "NaN".into() } else { format!("{}", dense[at]) },
        }),
    }
}

/// A stack of layers.
#[derive(Debug, Clone, Default)]
pub struct Mlp {
    pub layers: Vec<Linear>,
}

impl Mlp {
    pub fn new(layers: Vec<Linear>) -> Result<Mlp> {
        for w in layers.windows(2) {
            if w[0].outputs != w[1].inputs {
                return Err(Error::Shape(format!("layer widths do not chain: {} then {}", w[0].outputs, w[1].inputs)));
            }
        }
        Ok(Mlp { layers })
    }
    pub fn inputs(&self) -> usize {
        self.layers.first().map_or(0, |l| l.inputs)
    }
    pub fn outputs(&self) -> usize {
        self.layers.last().map_or(0, |l| l.outputs)
    }
    /// Multiply-accumulates per sample.
    pub fn macs(&self) -> u64 {
        self.layers.iter().map(|l| (l.inputs * l.outputs) as u64).sum()
    }

    /// Runs the layers on `rows` inputs; ReLU after every layer, or after all but the last when
    /// `relu_last` is false. Returns rows × outputs.
    pub fn forward(&self, x: &[f32], rows: usize, relu_last: bool) -> Vec<f32> {
        let mut cur = x.to_vec();
        for (i, l) in self.layers.iter().enumerate() {
            let mut y = vec![0f32; rows * l.outputs];
            l.forward_strided(&cur, l.inputs, rows, &mut y);
            if relu_last || i + 1 < self.layers.len() {
                relu(&mut y);
            }
            cur = y;
        }
        cur
    }
}

/// A DLRM-shaped model: bottom MLP on dense features (may be empty: NCF), `cat` with the pooled
/// embeddings of `tables` tables of width `dim`, top MLP ending in one output and a sigmoid.
#[derive(Debug, Clone)]
pub struct Dlrm {
    pub dense_width: usize,
    pub bottom: Mlp,
    pub top: Mlp,
    pub tables: usize,
    pub dim: usize,
}

impl Dlrm {
    pub fn new(dense_width: usize, bottom: Mlp, top: Mlp, tables: usize, dim: usize) -> Result<Dlrm> {
        let bottom_out = if bottom.layers.is_empty() { dense_width } else { bottom.outputs() };
        if !bottom.layers.is_empty() && bottom.inputs() != dense_width {
            return Err(Error::Shape(format!(
                "bottom MLP takes {} inputs, dense width is {dense_width}",
                bottom.inputs()
            )));
        }
        let want = bottom_out + tables * dim;
        if top.inputs() != want {
            return Err(Error::Shape(format!(
                "top MLP takes {} inputs; cat of bottom output ({bottom_out}) and {tables} tables × dim {dim} gives {want}",
                top.inputs()
            )));
        }
        if top.outputs() != 1 {
            return Err(Error::Shape(format!("top MLP ends in {} outputs, need 1", top.outputs())));
        }
        Ok(Dlrm { dense_width, bottom, top, tables, dim })
    }

    pub fn bottom_out(&self) -> usize {
        if self.bottom.layers.is_empty() {
            self.dense_width
        } else {
            self.bottom.outputs()
        }
    }

    /// Bottom MLP on a batch of dense rows (identity when there is none).
    pub fn bottom_forward(&self, dense: &[f32], rows: usize) -> Vec<f32> {
        if self.bottom.layers.is_empty() {
            dense.to_vec()
        } else {
            self.bottom.forward(dense, rows, true)
        }
    }

    /// `cat` interaction: [bottom_out | pooled (tables·dim)] per row.
    pub fn concat(&self, bottom: &[f32], pooled: &[f32], rows: usize) -> Vec<f32> {
        let (b, e) = (self.bottom_out(), self.tables * self.dim);
        let mut z = Vec::with_capacity(rows * (b + e));
        for r in 0..rows {
            z.extend_from_slice(&bottom[r * b..(r + 1) * b]);
            z.extend_from_slice(&pooled[r * e..(r + 1) * e]);
        }
        z
    }

    /// Top MLP and sigmoid: click-through probabilities.
    pub fn top_forward(&self, z: &[f32], rows: usize) -> Vec<f32> {
        let mut y = self.top.forward(z, rows, false);
        y.iter_mut().for_each(|v| *v = sigmoid(*v));
        y
    }

    /// The whole model on a batch.
    pub fn forward(&self, dense: &[f32], pooled: &[f32], rows: usize) -> Result<Vec<f32>> {
        self.check_batch(dense, pooled, rows)?;
        let b = self.bottom_forward(dense, rows);
        let z = self.concat(&b, pooled, rows);
        Ok(self.top_forward(&z, rows))
    }

    pub fn check_batch(&self, dense: &[f32], pooled: &[f32], rows: usize) -> Result<()> {
        if dense.len() != rows * self.dense_width {
            return Err(Error::Shape(format!(
                "dense input has {} values, a batch of {rows} × {} needs {}",
                dense.len(),
                self.dense_width,
                rows * self.dense_width
            )));
        }
        if pooled.len() != rows * self.tables * self.dim {
            return Err(Error::Shape(format!(
                "pooled input has {} values, need {}",
                pooled.len(),
                rows * self.tables * self.dim
            )));
        }
        check_finite_dense(dense, self.dense_width)
    }

    /// Intra-layer decomposition (§IV-C2): top layer 0 as W_b·b + W_e·e, so the bottom MLP and
    /// the embedding sums feed it separately and neither waits for the concatenation. Returns
    /// (W_b: out × bottom_out, W_e: out × tables·dim), bias stays with layer 0.
    pub fn split_first_top_layer(&self) -> (Linear, Linear) {
        let l0 = &self.top.layers[0];
        let b = self.bottom_out();
        let e = l0.inputs - b;
        let mut wb = Vec::with_capacity(l0.outputs * b);
        let mut we = Vec::with_capacity(l0.outputs * e);
        for o in 0..l0.outputs {
            let row = &l0.weight[o * l0.inputs..(o + 1) * l0.inputs];
            wb.extend_from_slice(&row[..b]);
            we.extend_from_slice(&row[b..]);
        }
        let lb = Linear { inputs: b, outputs: l0.outputs, weight: wb, bias: l0.bias.clone() };
        let le = Linear { inputs: e, outputs: l0.outputs, weight: we, bias: vec![0.0; l0.outputs] };
        (lb, le)
    }

    /// The forward pass with top layer 0 decomposed: the device's data flow (same answers).
    pub fn forward_decomposed(&self, dense: &[f32], pooled: &[f32], rows: usize) -> Result<Vec<f32>> {
        self.check_batch(dense, pooled, rows)?;
        let (lb, le) = self.split_first_top_layer();
        let b = self.bottom_forward(dense, rows);
        let mut h = vec![0f32; rows * lb.outputs];
        lb.forward_strided(&b, lb.inputs, rows, &mut h);
        let mut he = vec![0f32; rows * le.outputs];
        le.forward_strided(pooled, le.inputs, rows, &mut he);
        h.iter_mut().zip(&he).for_each(|(a, e)| *a += e);
        let rest = Mlp { layers: self.top.layers[1..].to_vec() };
        if rest.layers.is_empty() {
            return Ok(h.into_iter().map(sigmoid).collect());
        }
        relu(&mut h);
        let mut y = rest.forward(&h, rows, false);
        y.iter_mut().for_each(|v| *v = sigmoid(*v));
        Ok(y)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lin(i: usize, o: usize, seed: u32) -> Linear {
        let w = (0..i * o)
            .map(|k| (((k as u32).wrapping_mul(2654435761u32) ^ seed) % 1000) as f32 / 1000.0 - 0.5)
            .collect();
        let b = (0..o).map(|k| (k as f32 * 0.1) - 0.2).collect();
        Linear::new(i, o, w, b).unwrap()
    }

    /// y = W·x + b by plain loops.
    fn naive(l: &Linear, x: &[f32]) -> Vec<f32> {
        (0..l.outputs)
            .map(|o| l.bias[o] + (0..l.inputs).map(|k| l.weight[o * l.inputs + k] * x[k]).sum::<f32>())
            .collect()
    }

    #[test]
    fn sgemm_layer_matches_loops() {
        let l = lin(7, 5, 3);
        let x: Vec<f32> = (0..3 * 7).map(|k| k as f32 * 0.01 - 0.1).collect();
        let mut y = vec![0f32; 15];
        l.forward_strided(&x, 7, 3, &mut y);
        for r in 0..3 {
            let want = naive(&l, &x[r * 7..r * 7 + 7]);
            for (a, b) in y[r * 5..r * 5 + 5].iter().zip(&want) {
                assert!((a - b).abs() < 1e-5, "{a} {b}");
            }
        }
    }

    #[test]
    fn decomposed_equals_concatenated_and_shapes_are_checked() {
        let (tables, dim) = (3, 4);
        let bottom = Mlp::new(vec![lin(6, 8, 1), lin(8, dim, 2)]).unwrap();
        let top = Mlp::new(vec![lin(dim + tables * dim, 5, 4), lin(5, 1, 5)]).unwrap();
        let m = Dlrm::new(6, bottom, top, tables, dim).unwrap();
        let rows = 4;
        let dense: Vec<f32> = (0..rows * 6).map(|k| (k % 7) as f32 * 0.3 - 0.9).collect();
        let pooled: Vec<f32> = (0..rows * tables * dim).map(|k| (k % 5) as f32 * 0.2 - 0.4).collect();
        let a = m.forward(&dense, &pooled, rows).unwrap();
        let b = m.forward_decomposed(&dense, &pooled, rows).unwrap();
        for (x, y) in a.iter().zip(&b) {
            assert!((x - y).abs() < 1e-6 && *x > 0.0 && *x < 1.0);
        }
        assert!(m.forward(&dense[1..], &pooled, rows).is_err());
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let mut d = dense.clone();
            d[2 * 6 + 5] = bad;
            let e = m.forward(&d, &pooled, rows).unwrap_err().to_string();
            assert!(e.contains("sample 2, feature 5"), "{e}");
        }
        let bad_top = Mlp::new(vec![lin(10, 1, 1)]).unwrap();
        let e = Dlrm::new(6, Mlp::new(vec![lin(6, dim, 1)]).unwrap(), bad_top, tables, dim).unwrap_err();
        assert!(e.to_string().contains("gives 16"), "{e}");
    }
}
