// A source archive holder: nothing to compile.
