# memra-bench plot: run `gnuplot THIS_FILE` (svg terminal, no display needed)
set terminal svg size 1200,480 dynamic enhanced font 'sans,11' background rgb 'white'
set output 'bench/results/h200-9b-q4km-2026-12-04-s12.svg'
set multiplot layout 1,2 title 'memra-bench: memra-forge 9b q4_k_m seed 1 (qwen35) on NVIDIA H200 (sm_90, 132 SMs), graph replay' noenhanced
$d0 << EOD
1 443.678 0.579625
2 597.957 0.401131
4 890.386 0.314349
8 1566.7 0.30418
16 2063.36 0.236682
EOD
set logscale x 2
set xrange [0.8:20]
set xtics (1,2,4,8,16)
set grid
set key top left
set xlabel 'batch tier B'
set ylabel 'tokens/s (all rows)'
set yrange [0:*]
plot $d0 using 1:2 with linespoints lw 2 pt 7 title 'depth 1024'
set ylabel 'fraction of copy bandwidth (3970 GB/s)'
set yrange [0:1.05]
plot $d0 using 1:3 with linespoints lw 2 pt 7 title 'depth 1024'
unset multiplot
