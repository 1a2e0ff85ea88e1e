# memra-bench plot: run `gnuplot THIS_FILE` (svg terminal, no display needed)
set terminal svg size 1200,480 dynamic enhanced font 'sans,11' background rgb 'white'
set output 'h200-9b-q4km-2026-12-04-flat.svg'
set multiplot layout 1,2 title 'memra-bench: memra-forge 9b q4_k_m seed 1 (qwen35) on NVIDIA H200 (sm_90, 132 SMs), graph replay' noenhanced
$d0 << EOD
1 321.055 0.417766
2 487.225 0.325552
4 846.494 0.297668
8 1450.83 0.280568
16 2074.06 0.236967
EOD
$d1 << EOD
1 280.323 0.437929
2 406.224 0.377452
4 639.455 0.391759
8 951.665 0.432419
16 1203.04 0.451441
EOD
set logscale x 2
set xrange [0.8:20]
set xtics (1,2,4,8,16)
set grid
set key top left
set xlabel 'batch tier B'
set ylabel 'tokens/s (all rows)'
set yrange [0:*]
plot $d0 using 1:2 with linespoints lw 2 pt 7 title 'depth 1024', \
     $d1 using 1:2 with linespoints lw 2 pt 7 title 'depth 32768'
set ylabel 'fraction of copy bandwidth (3985 GB/s)'
set yrange [0:1.05]
plot $d0 using 1:3 with linespoints lw 2 pt 7 title 'depth 1024', \
     $d1 using 1:3 with linespoints lw 2 pt 7 title 'depth 32768'
unset multiplot
