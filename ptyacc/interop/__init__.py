"""Other packages' files: a PtyRAD params file made a ptyacc config (``ptyrad_params``), other
packages' reconstructions read as a start (``foreign``), and the resampling that fits any start to
this run's pixel, window, slices and modes (``resample``)."""
