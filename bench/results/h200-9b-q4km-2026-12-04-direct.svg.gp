# memra-bench plot: run `gnuplot THIS_FILE` (svg terminal, no display needed)
set terminal svg size 1200,480 dynamic enhanced font 'sans,11' background rgb 'white'
set output 'h200-9b-q4km-2026-12-04-direct.svg'
set multiplot layout 1,2 title 'memra-bench: memra-forge 9b q4_k_m seed 1 (qwen35) on NVIDIA H200 (sm_90, 132 SMs), graph replay' noenhanced
$d0 << EOD
1 315.606 0.412456
2 490 0.328826
4 847.926 0.299464
8 1449.28 0.281482
16 2072.6 0.237826
EOD
$d1 << EOD
1 274.989 0.431458
2 408.287 0.381014
4 640.763 0.394262
8 952.111 0.434497
16 1204.78 0.454051
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
set ylabel 'fraction of copy bandwidth (3968 GB/s)'
set yrange [0:1.05]
plot $d0 using 1:3 with linespoints lw 2 pt 7 title 'depth 1024', \
     $d1 using 1:3 with linespoints lw 2 pt 7 title 'depth 32768'
unset multiplot
