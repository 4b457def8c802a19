"""The fast paths of the network in :mod:`elmo.model.network`, one module per kind, each tested
against that specification: fixed-size row blocks and oneDNN's products (:mod:`~elmo.kernels.blocks`),
the fused training window of the LSTM (:mod:`~elmo.kernels.fused_lstm`), the LSTM's inference kernels
(:mod:`~elmo.kernels.cpu_lstm`), the token encoder's (:mod:`~elmo.kernels.encoder`), and the one
place that chooses between them (:mod:`~elmo.kernels.dispatch`)."""
