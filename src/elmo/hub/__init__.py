"""Where models come from: the packaged model, the published ones and their downloads, and the
files a training run or an export leaves behind."""
